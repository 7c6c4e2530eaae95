"""A library error in the CLI's words: the library's advice is for Python callers
(``create=False``, "pass the DSN"); a command names its flags instead."""

from __future__ import annotations

from .._core.errors import DecryptionError, NotAStoreError, StateNotFoundError
from ._keys import KEYS_ENV

#: What to do about a place that holds no statekeep store, as the CLI says it.
GIVE_A_STORE = "give --store the folder or URL statekeep saved to (the commands that read create no store)"


def cli_text(failure: Exception, text: str) -> str:
    """``text`` (``failure``'s message) with the library's advice replaced by the CLI's."""
    if isinstance(failure, NotAStoreError) and failure.advice:
        return f"{failure.found}; {GIVE_A_STORE}"
    if isinstance(failure, StateNotFoundError):
        return failure.found  # the advice is the Python API's (create=True)
    if isinstance(failure, DecryptionError):
        return f"{text} (give the keys with --keys FILE or ${KEYS_ENV})"
    return text
