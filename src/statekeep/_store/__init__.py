"""The store seam: the Store contract, the engine interface a backend implements (its hooks,
its capability groups) and the base that serves the public methods over it, agent memory,
preconditions."""


def __getattr__(name: str) -> object:
    # statekeep 0.1's ``statekeep._store`` was the module now at ``.contract``: its names stay
    # reachable here for one release, so pickles that name them still load.
    if name in ("Store",):
        from . import contract

        return getattr(contract, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
