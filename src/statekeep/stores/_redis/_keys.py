"""RedisStore's key names in one namespace, and what a snapshot puts in the indexes (pure).

The listing indexes are sorted sets whose members all have score 0 and read, in
lexicographic order, in listing order: a member is the snapshot's ``updated_at`` as 18
digits counting *down* (microseconds before the end of year 9999), then the id. So
``ZRANGEBYLEX`` walks most recently updated first, ties by id (ids are ASCII, so their
bytes sort as Python compares them), and a page cursor ``(updated_at, id)`` is the
exclusive lower bound ``"(" + member``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from ..._core.labels import DEFAULT_NAMESPACE
from ..._core.query import ListQuery
from ..._core.records import SavedState, utc_time

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FIRST = datetime(1, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
#: Microseconds from year 1 to the end of year 9999: the largest time a member holds.
_TOP = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - _FIRST) // _US
WIDTH = 18

#: What ``_stamp`` puts first in a snapshot for the write script to replace with the server's
#: time plus the retention (``{"expires_at":"<now + retention>"``), as encoded.
STAMP = "sk:stamp-with-server-time"
STAMPED = b'{"expires_at":"' + STAMP.encode() + b'"'


def down(when: datetime) -> str:
    """``when`` as the 18 digits of a member: later times give smaller strings."""
    return f"{_TOP - (when - _FIRST) // _US:0{WIDTH}d}"


def member(updated_at: datetime, sid: str) -> bytes:
    """The index member of a State: its place in listing order."""
    return (down(updated_at) + sid).encode()


def epoch_us(when: datetime) -> int:
    """``when`` as microseconds since 1970 (the server's TIME, as the scripts count)."""
    return (when - _EPOCH) // _US


def from_us(us: int) -> datetime:
    """Microseconds since 1970 (as the scripts count) as an aware UTC datetime."""
    return _EPOCH + us * _US


@dataclass(frozen=True, slots=True)
class Keys:
    """The keys of one namespace under a prefix."""

    base: bytes  # every key of the namespace starts with this
    namespace: str = DEFAULT_NAMESPACE  # the one they are of (what its leases name)

    @classmethod
    def of(cls, prefix: bytes, namespace: str, cluster: bool = False) -> Keys:
        """The default namespace keeps the keys it had before namespaces (layout 1's
        ``state:`` and ``entries:``); another one lives under ``<prefix>ns:<name>:``.
        On a Redis Cluster (``cluster``) every namespace, the default one too, lives under
        ``<prefix>{<name>}:``: one hash tag, so all its keys are in one slot (one node),
        where each script finds every key it names."""
        if cluster:
            return cls(prefix + b"{" + namespace.encode() + b"}:", namespace)
        if namespace == DEFAULT_NAMESPACE:
            return cls(prefix)
        return cls(prefix + b"ns:" + namespace.encode() + b":", namespace)

    @property
    def layout(self) -> bytes:
        """The layout key of a namespace on a Redis Cluster (one server: ``<prefix>layout``)."""
        return self.base + b"layout"

    @property
    def state(self) -> bytes:
        return self.base + b"state:"

    @property
    def entries(self) -> bytes:
        return self.base + b"entries:"

    @property
    def common(self) -> tuple[bytes, bytes, bytes, bytes]:
        """The namespace's own keys every changing script takes: the listing index, the
        rows (id -> the indexes it is in), the unlisted States, the expiry index."""
        return (
            self.base + b"ix:all",
            self.base + b"ix:rows",
            self.base + b"ix:bad",
            self.base + b"ix:expiry",
        )

    @property
    def lease(self) -> bytes:
        return self.base + b"lease:"

    def lease_key(self, sid: str) -> bytes:
        """The State's lease row (a hash with no TTL: delete, gc and native expiry leave it)."""
        return self.lease + sid.encode()

    def state_keys(self, sid: str) -> tuple[bytes, bytes]:
        raw = sid.encode()
        return self.state + raw, self.entries + raw

    def index(self, kind: str, value: str) -> bytes:
        """The index of the States whose ``kind`` is ``value``."""
        return self.base + b"ix:" + kind.encode() + b":" + value.encode()

    def filters(self, query: ListQuery) -> tuple[list[bytes], list[bytes]]:
        """The indexes a row must be in, and those it must not be in, for ``query``."""
        must = [self.index("label", f"{k}={v}") for k, v in sorted(query.labels.items())]
        for kind, value in (("parent", query.parent), ("agent", query.agent), ("stopped", query.stopped_by)):
            if value is not None:
                must.append(self.index(kind, value))
        if query.status is not None:
            must.append(self.index("status", query.status))
        if query.finished is True:
            must.append(self.index("status", "finished"))
        must_not = [self.index("status", "finished")] if query.finished is False else []
        return must, must_not


@dataclass(frozen=True, slots=True)
class Indexed:
    """What one snapshot puts in the indexes: its member ("" if it cannot be listed), the
    indexes it is in, its expiry in microseconds since 1970 ("" for none), and whether the
    script stamps the expiry (retention) with the server's time."""

    member: bytes
    indexes: list[bytes]
    expiry: str
    stamp: bool


def indexed(keys: Keys, sid: str, snapshot: bytes) -> Indexed:
    """The index entries of State ``sid`` with ``snapshot`` (as encoded for the write)."""
    stamp = snapshot.startswith(STAMPED)
    try:
        data: Any = orjson.loads(snapshot)
    except orjson.JSONDecodeError:
        return Indexed(b"", [], "", False)
    if type(data) is not dict:
        return Indexed(b"", [], "", False)
    if stamp:
        data["expires_at"] = None
    expiry = "" if stamp else _expiry(data.get("expires_at"))
    try:
        row = SavedState.from_snapshot(sid, data)
    except ValueError:
        return Indexed(b"", [], expiry, stamp)
    indexes = [keys.index("status", row.status)]
    if row.agent is not None:
        indexes.append(keys.index("agent", row.agent))
    if row.parent is not None:
        indexes.append(keys.index("parent", row.parent))
    if row.stopped_by is not None:
        indexes.append(keys.index("stopped", row.stopped_by))
    indexes.extend(keys.index("label", f"{k}={v}") for k, v in row.labels.items())
    return Indexed(member(row.updated_at, sid), indexes, expiry, stamp)


def _expiry(raw: object) -> str:
    """An explicit ``expires_at`` as microseconds since 1970; "" if none or unreadable
    (such a snapshot never expires, as on every store)."""
    if type(raw) is not str:
        return ""
    try:
        return str(epoch_us(utc_time(raw)))
    except ValueError:
        return ""
