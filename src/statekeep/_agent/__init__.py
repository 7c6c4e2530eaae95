"""The reference agent loop and its tools."""


def __getattr__(name: str) -> object:
    # statekeep 0.1's ``statekeep._agent`` was the module now at ``.loop``: its names stay
    # reachable here for one release, so pickles that name them still load.
    if name in ("Agent", "Reply", "ScriptedModel"):
        from . import loop

        return getattr(loop, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
