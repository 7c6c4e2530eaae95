"""The exceptions statekeep raises on purpose: all are :class:`StatekeepError`.

Each also keeps the built-in parent it had before the family existed, so code written as
``except ValueError`` / ``except LookupError`` / ``except PermissionError`` keeps working.

A mistake in the caller's arguments stays a plain built-in error, as in the standard
library: TypeError for a value JSON cannot hold or an argument of the wrong type,
ValueError for a bad State id, a write whose seqs do not follow on (a gap), a State method
its history cannot follow, a bad store URL, an id that differs only in case from a stored
one on a case-insensitive folder; RuntimeError for a call to a closed store or a write to a
``read_only`` FileStore. So does a setting of the machine or server that a store cannot work
with (RuntimeError: SQLite without WAL support, a PostgreSQL database not in UTF8): the
message says what to change.
"""

from __future__ import annotations


class StatekeepError(Exception):
    """The base of every exception statekeep raises on purpose."""


class AdvisedError(StatekeepError):
    """An error whose message is what was found (``found``), then what to do about it
    (``advice``, in a Python caller's words: the CLI gives its own, in flags)."""

    def __init__(self, found: str, advice: str = "") -> None:
        super().__init__(f"{found}. {advice}" if advice else found)
        self.found = found
        self.advice = advice


class StateNotFoundError(AdvisedError, LookupError):
    """There is no State with that id (never created, deleted, or expired)."""


class StateExistsError(StatekeepError, ValueError):
    """A State with that id exists already, so it cannot be created; nothing was written."""


class UnsupportedFormatError(StatekeepError, ValueError):
    """Written by a newer statekeep (a newer history format or store schema): upgrade
    statekeep to read it. Also what ``load`` raises for a State a framework adapter wrote
    (a LangGraph thread, an OpenAI Agents session, an alpineagents State), naming the
    adapter that reads it. Nothing was changed."""


class StateConflictError(StatekeepError, ValueError):
    """Another writer saved a different entry for a seq this write also sends.

    Nothing of the write was stored. Read the State again, then retry from what the
    store now holds.
    """


class CorruptStateError(StatekeepError, ValueError):
    """What a store holds for a State cannot be read back as it was written.

    The message names the file (or key) and the place. Nothing is repaired or dropped
    silently: a damaged record followed by good ones needs a person to look at it.
    """


class UnsafeStoreError(StatekeepError, PermissionError):
    """A store's folder or file could be changed by another local user, so it is not used.

    Raised by :class:`FileStore` for a store folder, State folder or file that is not owned
    by the current user, or is writable by group or others (as ssh refuses such keys).
    The message names the path and the ``chown``/``chmod`` that fixes it. ``list()``
    leaves such a State out with a warning instead of failing whole.
    """


class NotAStoreError(AdvisedError, ValueError):
    """A store was pointed at something that is not a statekeep store: another program's
    database, a file that is not a database, a key prefix holding no statekeep keys.

    Raised before anything there is changed: the message says what was found and what to
    pass instead.
    """


class LeaseHeldError(StatekeepError, RuntimeError):
    """Another owner holds a live lease on the State, so this call was refused and nothing
    was changed.

    Raised by ``acquire`` while another lease is live, and by a write, delete or fork
    without ``lease=`` while any lease is live. ``state_id``, ``owner`` (the holder) and
    ``expires_at`` (an aware UTC datetime, by the store's clock) say whose it is and until
    when: wait for it to expire or be released, or pass the holder's lease.
    """

    def __init__(self, message: str, state_id: str, owner: str, expires_at: object) -> None:
        super().__init__(message)
        self.state_id = state_id
        self.owner = owner
        self.expires_at = expires_at


class StaleLeaseError(StateConflictError):
    """The lease given is no longer the State's current one: it expired, was released, or
    another owner took the State over since. Nothing was written.

    The worker holding it must stop: another may be running the State now. Acquire a new
    lease and load the State again before going on.
    """


class DecryptionError(StatekeepError, ValueError):
    """A sealed record could not be opened: its key is not in the keyring, or it fails
    authentication (changed, copied from another State or seq, or sealed with another key
    of the same id); or a store opened with ``encrypt=`` found plaintext it may not read.

    The message names the State, the record and the key id. Nothing is returned in part.
    """


class StepInDoubtError(StatekeepError, RuntimeError):
    """A durable step (``store.step``, ``ctx.step``) was started and its end never recorded
    (the process stopped while it ran), and it has neither ``reconcile`` nor
    ``idempotent=True``: its function may or may not have run, so it is not run again.

    The step is then recorded as ``unknown`` (saved before this is raised), so every later
    call of it raises this too. ``state_id``, ``name``, ``key`` (the step's idempotency key,
    to look its effect up by) and ``attempt`` say which.
    """

    def __init__(self, message: str, state_id: str, name: str, key: str, attempt: int) -> None:
        super().__init__(message)
        self.state_id = state_id
        self.name = name
        self.key = key
        self.attempt = attempt


class StepFailedError(StatekeepError, RuntimeError):
    """A durable step's function raised: its error is recorded (outcome ``error``, saved
    before this is raised) and raised again as this on every later call of the step,
    without running the function again. ``output`` is the recorded error text
    (``"TypeName: message"``); the first time, ``__cause__`` is the exception itself.
    ``state_id`` and ``name`` say which step.
    """

    def __init__(self, message: str, state_id: str, name: str, output: object) -> None:
        super().__init__(message)
        self.state_id = state_id
        self.name = name
        self.output = output
