"""What ``copy``, ``export`` and ``import`` say about a record they could not open: what was
found, and what to do in that command's own options (never the library's keywords)."""

from __future__ import annotations

from .._core.errors import DecryptionError
from .._protect.protection import InClearError, RefusedRecord
from ._keys import KEYS_ENV

# (command, side) -> the option that gives that side's keys
_KEYS = {
    ("copy", "source"): f"--src-keys FILE or ${KEYS_ENV}",
    ("copy", "destination"): "--dst-keys FILE",
    ("export", "source"): f"--keys FILE or ${KEYS_ENV}",
    ("import", "destination"): f"--keys FILE or ${KEYS_ENV}",
}
_NO_KEYS = {
    ("copy", "source"): f"without --src-keys (and ${KEYS_ENV} unset)",
    ("copy", "destination"): "without --dst-keys",
    ("export", "source"): f"without --keys (and ${KEYS_ENV} unset)",
    ("import", "destination"): f"without --keys (and ${KEYS_ENV} unset)",
}


def keys_trouble(command: str, error: DecryptionError, stores: dict[str, str]) -> str:
    """The line for ``error`` met by ``command``; ``stores``: each side's store (full path or
    URL). A copy's error says its side (source or destination); export reads its source,
    import writes its destination."""
    side = str(getattr(error, "side", "destination" if command == "import" else "source"))
    found = getattr(error, "error", error)
    fact = found.fact if isinstance(found, RefusedRecord) else str(found)
    where = f"in the {side}: " if command == "copy" else ""
    if isinstance(found, InClearError):
        advice = (
            f"{command} {_NO_KEYS[command, side]} if that store is not encrypted, or seal what it "
            f"holds in clear first (statekeep rekey --allow-plaintext --store {stores[side]} --keys FILE)"
        )
    else:
        whose = f"the {side}'s" if command == "copy" else "the store's"
        advice = f"give {whose} keys with {_KEYS[command, side]}"
    return f"{command}: {where}{fact}; {advice}"
