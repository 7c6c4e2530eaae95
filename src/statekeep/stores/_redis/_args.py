"""The argument lists of RedisStore's write, delete and fork scripts (pure; the scripts: :mod:`._lua`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ..._core.codec import encode
from ..._core.leases import Lease
from ..._core.writes import PreparedWrite
from ._blob_lua import blob_args
from ._keys import Keys, indexed


def write_args(
    keys: Keys, write: PreparedWrite, approved: Sequence[bytes], retention_us: str, blob_prefix: bytes = b""
) -> tuple[Any, ...]:
    """The write script's keys and arguments for ``write`` (``approved``: stored entries
    found equal in Python, see the package docstring; ``retention_us``: "" for none;
    ``blob_prefix``: the store's prefix, where its blobs are)."""
    sid = write.state_id
    found = None if write.snapshot is None else indexed(keys, sid, write.snapshot)
    head = [
        sid,
        "1" if write.create else "0",
        str(write.first_seq),
        str(len(write.lines)),
        "0" if write.snapshot is None else "1",
        b"" if write.snapshot is None else write.snapshot,
        str(len(approved)),
        b"" if found is None else found.member,
        "" if found is None else found.expiry,
        retention_us if found is not None and found.stamp else "",
        str(0 if found is None else len(found.indexes)),
        *lease_args(write.lease),
        "" if write.expect_next is None else str(write.expect_next),
        "1" if write.opener is None else "0",
        write.incarnation or "",
        "1" if write.bound else "0",
        *([] if found is None else found.indexes),
    ]
    lines = [line[:-1] for line in write.lines]
    blobs = blob_args(blob_prefix, write.blobs, write.blob_refs)
    return (*keys.state_keys(sid), *keys.common, keys.lease_key(sid), *head, *lines, *approved, *blobs)


def lease_args(lease: Lease | None) -> tuple[str, str]:
    """The lease a caller passed, as the fence in the scripts takes it: token and owner
    (``""`` for none)."""
    return ("", "") if lease is None else (str(lease.token), lease.owner)


def fork_args(
    keys: Keys,
    source_id: str,
    entries: Sequence[dict[str, Any]],
    write: PreparedWrite,
    retention_us: str,
    blob_prefix: bytes = b"",
) -> tuple[list[bytes], list[Any]]:
    """The fork script's keys and arguments: copy ``entries`` (as read from ``source_id``;
    the script checks their SHA-1) to the State of ``write`` (a create with no entries)."""
    assert write.snapshot is not None
    digest = hashlib.sha1(b"\n".join(encode(e, "entry") for e in entries)).hexdigest()
    found = indexed(keys, write.state_id, write.snapshot)
    names = [
        *keys.state_keys(source_id), *keys.state_keys(write.state_id), *keys.common,
        keys.lease_key(write.state_id),
    ]  # fmt: skip
    args = [
        write.state_id, str(entries[-1]["seq"] if entries else -1), digest, write.snapshot, found.member, found.expiry,
        retention_us if found.stamp else "", str(len(found.indexes)), write.incarnation or "",
        *found.indexes, blob_prefix,
    ]  # fmt: skip
    return names, args
