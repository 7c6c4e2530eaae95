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


class UnsafeStoreError(PermissionError):
    """A store's folder or file could be changed by another local user, so it is not used.

    Raised by :class:`FileStore` for a store folder, State folder or file that is not owned
    by the current user, or is writable by group or others (as ssh refuses such keys).
    The message names the path and the ``chown``/``chmod`` that fixes it. ``list()``
    leaves such a State out with a warning instead of failing whole.
    """


class NotAStoreError(ValueError):
    """A store was pointed at something that is not a statekeep store: another program's
    database, a file that is not a database, a key prefix holding no statekeep keys.

    Raised before anything there is changed: the message says what was found and what to
    pass instead.
    """
