"""Fenced leases as the stores serve them, and the keep-alive of an Agent's lease."""


def __getattr__(name: str) -> object:
    # statekeep 0.1's ``statekeep._leases`` was the module now at ``statekeep._core.leases``:
    # its class stays reachable here for one release, so pickles that name it still load.
    if name == "Lease":
        from .._core.leases import Lease

        return Lease
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
