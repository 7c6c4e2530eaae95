"""Exceptions raised by statekeep stores."""

from __future__ import annotations


class StateConflictError(ValueError):
    """Another writer saved a different entry for a seq this write also sends.

    Nothing of the write was stored. Read the State again, then retry from what the
    store now holds.
    """


class CorruptStateError(ValueError):
    """What a store holds for a State cannot be read back as it was written.

    The message names the file (or key) and the place. Nothing is repaired or dropped
    silently: a damaged record followed by good ones needs a person to look at it.
    """


class NotAStoreError(ValueError):
    """A store was pointed at something that is not a statekeep store: another program's
    database, a file that is not a database, a key prefix holding no statekeep keys.

    Raised before anything there is changed: the message says what was found and what to
    pass instead.
    """
