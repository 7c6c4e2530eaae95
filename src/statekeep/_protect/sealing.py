"""Encryption at rest: a :class:`Keyring` of AES-256-GCM keys, and records sealed with it.

Each entry and each snapshot is sealed on its own, with a fresh 96-bit random nonce, under
the ring's current key. The associated data binds it to ``(namespace, state id,
incarnation, seq)`` (``"snapshot"`` for a snapshot), so a record copied to another State,
seq or namespace, or from an earlier State of the same id (deleted and created again: a new
incarnation), fails to open. Records of a State created before incarnations (its
incarnation is None) are bound as before, without it. A sealed record is stored as::

    {"seq": 3, "at": "2026-...", "sk.sealed": "k2:<base64 of nonce + ciphertext + tag>"}

and a sealed snapshot keeps the listing fields in clear (times, turn, status, agent,
parent, labels, expiry, fork source; plus the keys the ring's ``clear`` names) and a sealed
``task`` string (bound to its place only: listings open it without reading the State), so
listings work without the key. The sealed copy names the clear fields, so opening it
checks that exactly those are there, each equal to its sealed value -- the State's own
expiry too; only a store's retention stamp may move, and only later. Opening checks the
tag: a changed byte, a swapped record or a wrong key is a :class:`DecryptionError` naming
the key id, never garbage. The ``cryptography`` package (the ``statekeep[crypto]`` extra)
does the AES.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from .._core.errors import DecryptionError
from .._core.records import utc_time
from .._core.redactor import INDEX_KEYS
from .._core.writes import same_json

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SEALED = "sk.sealed"
#: A sealed task string (in a snapshot and in listing rows) starts with this.
TASK_MARK = "sk.sealed:"
KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
NONCE = 12
#: The snapshot keys kept in clear: what listings and expiry read (the task is sealed).
CLEAR_SNAPSHOT = INDEX_KEYS - {"task"}
CLEAR_ENTRY = ("seq", "at")
#: Clear snapshot fields a store may change after the write (a retention stamp, stamped
#: by the server or slid by a read): only later than the sealed value, and only when the
#: sealed copy says the expiry is the store's (``"expiry": "retention"``).
STORE_MANAGED = frozenset({"expires_at", "expiry"})
#: The sealed copy of a snapshot: ``{"sk.v": 2, "clear": [the clear keys], "snapshot": {...}}``
#: (version 1, before it, was the snapshot alone, without its expiry).
_COPY = 2


def _aesgcm() -> type[AESGCM]:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise ImportError(
            "encryption needs the cryptography package: pip install 'statekeep[crypto]'"
        ) from None
    return AESGCM


class Keyring:
    """AES-256-GCM keys by id, for a store's ``encrypt=``: seal with ``current``, open
    with any key in the ring.

    ``keys`` maps a key id (1 to 64 of ``A-Z a-z 0-9 _ -``; it is stored beside each
    record) to 32 random bytes, e.g. from :meth:`generate_key`; keep them in a secret
    manager. To rotate, add a new key and make it ``current``: new records are sealed with
    it, old ones still open, and ``statekeep rekey`` re-seals them so the old key can go.
    ``clear`` names extra snapshot keys to keep in clear (e.g. ``("task",)`` to let the
    database see it). Its repr shows key ids only.
    """

    def __init__(self, keys: Mapping[str, bytes], current: str, *, clear: Iterable[str] = ()) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise TypeError("Keyring needs a dict of key id -> 32-byte key, with at least one key")
        aesgcm = _aesgcm()
        self._ciphers: dict[str, AESGCM] = {}
        self._naming: dict[str, bytes] = {}  # per key: the key blob names are HMACs under
        for kid, key in keys.items():
            if not isinstance(kid, str) or not KEY_ID.fullmatch(kid):
                # Never shown: a key given where its id goes must not reach a log.
                raise ValueError(
                    f"a key id must be a str of 1 to 64 of A-Z a-z 0-9 _ -, got {_shape(kid)}; "
                    "Keyring takes {key id: key}"
                )
            if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
                size = f"{len(key)} bytes" if isinstance(key, (bytes, bytearray)) else type(key).__name__
                raise ValueError(
                    f"key {_shown_id(kid)} must be 32 bytes (AES-256), got {size}; make one with "
                    "Keyring.generate_key()"
                )
            self._ciphers[kid] = aesgcm(bytes(key))
            self._naming[kid] = hmac.digest(bytes(key), b"statekeep.blob-names.v1", "sha256")
        if not isinstance(current, str) or current not in self._ciphers:
            raise ValueError(
                f"current= must be one of the ring's key ids ({', '.join(sorted(keys))}), got {_shape(current)}"
            )
        self.current = current
        names = [clear] if isinstance(clear, str) else list(clear)
        if not all(isinstance(name, str) for name in names):
            raise TypeError("clear takes snapshot key names (str)")
        self.clear = CLEAR_SNAPSHOT | frozenset(names)

    @staticmethod
    def generate_key() -> bytes:
        """32 random bytes from the OS: a new AES-256 key."""
        return os.urandom(32)

    @property
    def key_ids(self) -> list[str]:
        return sorted(self._ciphers)

    def __repr__(self) -> str:
        return f"Keyring(keys={self.key_ids!r}, current={self.current!r})"

    # -- sealing ------------------------------------------------------------------------

    def seal(self, plain: bytes, aad: bytes) -> str:
        """``plain`` sealed with the current key: ``"<key id>:<base64>"``."""
        nonce = os.urandom(NONCE)
        box = self._ciphers[self.current].encrypt(nonce, plain, aad)
        return f"{self.current}:{base64.b64encode(nonce + box).decode()}"

    def open(self, sealed: object, aad: bytes, what: str) -> bytes:
        """The plaintext of ``sealed``; :class:`DecryptionError` naming ``what`` and the key id."""
        if not isinstance(sealed, str) or ":" not in sealed:
            raise DecryptionError(f"{what} is not a sealed record statekeep wrote")
        kid, _, body = sealed.partition(":")
        cipher = self._ciphers.get(kid)
        if cipher is None:
            raise DecryptionError(
                f"{what} is sealed with key {kid!r}, which is not in the keyring "
                f"({', '.join(self.key_ids)}): add that key to the Keyring to read it"
            )
        try:
            raw = base64.b64decode(body, validate=True)
            if len(raw) < NONCE + 16:
                raise ValueError("too short")
            return cipher.decrypt(raw[:NONCE], raw[NONCE:], aad)
        except (binascii.Error, ValueError, _invalid_tag()):
            raise DecryptionError(
                f"{what} (key {kid!r}) fails authentication: it was changed, copied from another "
                f"State or seq, or the key given as {kid!r} is not the one it was sealed with. "
                "Nothing was returned"
            ) from None

    def blob_name(self, data: bytes, namespace: str) -> str:
        """The name of a blob holding ``data`` in ``namespace``: an HMAC-SHA256 of them under
        a key derived from the current key (so equal values share a blob within a namespace
        only, and the name shows nothing of the value to whoever lacks the key)."""
        mac = hmac.new(self._naming[self.current], orjson.dumps(["statekeep.blob", namespace]), "sha256")
        mac.update(b"\n")
        mac.update(data)
        return mac.hexdigest()

    def rekeyed(self, sealed: object) -> bool:
        """Whether a stored record is sealed with a key other than the current one."""
        return isinstance(sealed, str) and not sealed.startswith(self.current + ":")


def _shape(value: object) -> str:
    """A wrong key id as errors show it: its type and length, never its text (it may be a key)."""
    size = f" of {len(value)}" if isinstance(value, (str, bytes, bytearray)) else ""
    return f"a {type(value).__name__}{size}"


def _shown_id(kid: str) -> str:
    """A valid key id as errors show it: a long one may be a (hex) key given in its place."""
    return repr(kid) if len(kid) <= 24 else f"id {_shape(kid)} (not shown: it may be a key)"


def _invalid_tag() -> type[Exception]:
    from cryptography.exceptions import InvalidTag

    return InvalidTag


def aad(namespace: str, state_id: str, place: int | str, incarnation: str | None = None) -> bytes:
    """The associated data that binds a record to its place (and to the State's
    incarnation; None for a State created before incarnations, sealed as then)."""
    if incarnation is None:
        return orjson.dumps(["statekeep.seal.v1", namespace, state_id, place])
    return orjson.dumps(["statekeep.seal.v2", namespace, state_id, incarnation, place])


def blob_aad(namespace: str, name: str) -> bytes:
    """The associated data of a sealed blob: its namespace and name (a blob's bytes moved to
    another name or namespace fail to open)."""
    return orjson.dumps(["statekeep.blob.v1", namespace, name])


def seal_blob(ring: Keyring, data: bytes, namespace: str, name: str) -> bytes:
    """A blob's stored bytes: ``data`` sealed, ``"<key id>:<base64>"``."""
    return ring.seal(data, blob_aad(namespace, name)).encode()


def open_blob(ring: Keyring, stored: bytes, namespace: str, name: str, what: str) -> bytes:
    """A sealed blob's plaintext; :class:`DecryptionError` naming ``what``."""
    return ring.open(stored.decode("ascii", "replace"), blob_aad(namespace, name), what)


def seal_entry(
    ring: Keyring,
    line: bytes,
    entry: Mapping[str, Any],
    namespace: str,
    state_id: str,
    incarnation: str | None,
) -> bytes:
    """The stored line (``\\n``-ended) of an entry whose plaintext line is ``line``."""
    seq = entry["seq"]
    clear: dict[str, Any] = {k: entry[k] for k in CLEAR_ENTRY if k in entry}
    clear[SEALED] = ring.seal(line.rstrip(b"\n"), aad(namespace, state_id, seq, incarnation))
    return orjson.dumps(clear) + b"\n"


def seal_snapshot(
    ring: Keyring, snapshot: Mapping[str, Any], namespace: str, state_id: str, incarnation: str | None
) -> bytes:
    """The stored form of a snapshot: its listing fields in clear, a sealed task, and the
    whole snapshot sealed with the names of its clear fields, so that opening it can check
    the clear part field by field (none added, none taken away)."""
    keep = ring.clear
    clear = {k: v for k, v in snapshot.items() if k in keep}
    task = snapshot.get("task")
    if "task" not in keep and isinstance(task, str):
        clear["task"] = TASK_MARK + ring.seal(task.encode(), aad(namespace, state_id, "task"))
    copy = {"sk.v": _COPY, "clear": sorted(clear), "snapshot": snapshot}
    clear[SEALED] = ring.seal(orjson.dumps(copy), aad(namespace, state_id, "snapshot", incarnation))
    return orjson.dumps(clear)


def is_sealed(record: Mapping[str, Any]) -> bool:
    return SEALED in record


def open_entry(
    ring: Keyring,
    stored: Mapping[str, Any],
    namespace: str,
    state_id: str,
    seq: int,
    incarnation: str | None,
) -> dict[str, Any]:
    """The entry a sealed stored one holds, checked to be the entry of ``seq``."""
    what = f"State {state_id!r} entry seq {seq}"
    place = aad(namespace, state_id, seq, incarnation)
    entry = orjson.loads(ring.open(stored.get(SEALED), place, what))
    if type(entry) is not dict or entry.get("seq") != seq or stored.get("seq") != seq:
        raise DecryptionError(f"{what} opens to a record of another seq: the history was rearranged")
    return entry


def open_snapshot(
    ring: Keyring, stored: Mapping[str, Any], namespace: str, state_id: str, incarnation: str | None
) -> dict[str, Any]:
    """The snapshot a sealed stored one holds. The clear fields must be exactly those the
    sealed copy names, each equal to its sealed value; a store's retention stamp alone may
    be later than sealed (see :func:`_check_clear`)."""
    what = f"State {state_id!r} snapshot"
    place = aad(namespace, state_id, "snapshot", incarnation)
    copy = orjson.loads(ring.open(stored[SEALED], place, what))
    unsealed: frozenset[str] = frozenset()
    if type(copy) is dict and copy.get("sk.v") == _COPY and type(copy.get("snapshot")) is dict:
        snapshot: dict[str, Any] = copy["snapshot"]
        names = copy.get("clear")
    elif type(copy) is dict:
        # Sealed before the copy named its clear fields, and without the expiry: each clear
        # field but the expiry must equal its sealed copy.
        snapshot, unsealed = copy, STORE_MANAGED
        names = sorted(set(stored) - {SEALED} - unsealed)
    else:
        raise DecryptionError(f"{what} opens to something that is not a snapshot")
    _check_clear(ring, stored, snapshot, names, namespace, state_id, what, unsealed)
    return {**snapshot, **{k: stored[k] for k in STORE_MANAGED if k in stored}}


def _check_clear(
    ring: Keyring,
    stored: Mapping[str, Any],
    snapshot: Mapping[str, Any],
    names: object,
    namespace: str,
    state_id: str,
    what: str,
    unsealed: frozenset[str],
) -> None:
    """Raise unless the clear part holds exactly the fields ``names`` lists (and the
    ``unsealed`` ones, not checked), each equal to the sealed snapshot's: only a retention
    stamp (sealed ``"expiry": "retention"``) may be later than sealed, as a store stamps it
    with its clock or slides it on a read."""
    held = set(stored) - {SEALED} - unsealed
    listed = set(names) if type(names) is list else set()
    if held != listed:
        gone, added = sorted(listed - held), sorted(held - listed)
        detail = (
            f"its clear field {gone[0]!r} was removed"
            if gone
            else f"its clear field {added[0]!r} differs from the sealed copy (which has none): it was added"
        )
        raise DecryptionError(f"{what}: {detail} after it was written. Nothing was returned")
    stamp = snapshot.get("expiry") == "retention"
    for key in sorted(listed):
        value = stored[key]
        if key == "task" and isinstance(value, str) and value.startswith(TASK_MARK):
            value = open_task(ring, value, namespace, state_id)
        if key == "expires_at" and stamp and stored.get("expiry") == "retention":
            if _not_earlier(value, snapshot.get("expires_at")):
                continue
        elif key in snapshot and same_json(value, snapshot[key]):
            continue
        raise DecryptionError(
            f"{what}: its clear field {key!r} differs from the sealed copy: it was changed "
            "after it was written. Nothing was returned"
        )


def _not_earlier(value: object, sealed: object) -> bool:
    """Whether a stored retention stamp is a time no earlier than the sealed one (a
    sealed value that is no time -- a placeholder the server stamps -- bounds nothing)."""
    try:
        stamped = utc_time(value)
    except ValueError:
        return False
    try:
        return stamped >= utc_time(sealed)
    except ValueError:
        return isinstance(sealed, str)


def open_task(ring: Keyring, task: str, namespace: str, state_id: str) -> str:
    """A sealed task string opened (listing rows carry it sealed)."""
    what = f"State {state_id!r} task"
    return ring.open(task[len(TASK_MARK) :], aad(namespace, state_id, "task"), what).decode()
