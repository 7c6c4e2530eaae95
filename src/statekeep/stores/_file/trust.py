"""What a FileStore checks before it trusts a folder: owners and modes, and the store marker.

A store folder holds ``.statekeep-store``, a small JSON object statekeep writes when it
creates the store (or on the first write to a folder of States made before the marker
existed): ``{"format": 2}``, with ``"namespaces": [...]`` once a namespace other than the
default has a folder (``.ns.{name}``) in it. The format stays 2 with namespaces: a
statekeep that predates them reads the store folder as the default namespace, exactly as
this one does, and never enters a dot-folder (its listings skip them and its clean-up
touches only its own ``.creating-``/``.deleting-`` leftovers), so it sees the default
namespace's States and nothing of the others. A folder without a marker is used only if everything in it is a State or a
leftover of statekeep's own, so a mistyped path never turns a project folder into a
store whose ``delete`` removes the user's files.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from typing import Any

import orjson

from ..._core.errors import CorruptStateError, NotAStoreError, UnsafeStoreError, UnsupportedFormatError
from ..._core.ids import validate_id
from .._fsio import OsIO, write_file

MARKER = ".statekeep-store"
MARKER_TMP = ".statekeep-store.tmp-"
MARKER_FORMAT = 2  # 2: logs carry checksums and closing records (see logformat)
LOG = "log.jsonl"  # a State's files: its entry lines and each write's closing record, appended
SNAPSHOT = "snapshot.json"  # a copy of the current snapshot for listings, refreshed lazily
SNAPSHOT_TMP = "snapshot.json.tmp"  # the next copy while it is being written
LOG_TMP = "log.jsonl.tmp"  # a new log while a rekey writes it (renamed over the log)
STATE_FILES = frozenset({LOG, SNAPSHOT, SNAPSHOT_TMP, LOG_TMP})
NAMESPACE_DIR = ".ns."  # + a namespace's name: the folder of its States (not the default's)
CREATING = ".creating-"
DELETING = ".deleting-"

DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW  # a folder, never through a link


def check_owner(fd: int, path: object, io: OsIO | None = None) -> None:
    """Refuse what another user could change: not owned by us, or writable by group/others.

    As ssh does for its keys: another local user who can write a State's folder or file
    (or rename the store's States aside) could make us load a history of their choosing.
    """
    check_stat(os.fstat(fd) if io is None else io.fstat(fd), path)


_euid: int | None = None  # this process's effective uid, as last read


def euid() -> int:
    """This process's effective uid, read once (:func:`check_stat` reads it again when a
    file's owner does not match it)."""
    global _euid
    if _euid is None:
        _euid = os.geteuid()
    return _euid


def check_stat(st: os.stat_result, path: object) -> None:
    """:func:`check_owner` of what ``st`` describes."""
    global _euid
    if st.st_uid != _euid or st.st_mode & 0o022:
        # The uid read again (a system call) only when it does not match: a process that
        # changed its euid since is judged by its new one.
        _euid = me = os.geteuid()
        if st.st_uid != me or st.st_mode & 0o022:
            _unsafe(st, me, path)


def _unsafe(st: os.stat_result, me: int, path: object) -> None:
    if st.st_uid != me:
        raise UnsafeStoreError(
            f"{path} is owned by uid {st.st_uid}, not by you (uid {me}): another user could change "
            f"what statekeep reads there. Fix: chown {me} '{path}' (or use a store folder of your own)"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise UnsafeStoreError(
            f"{path} is writable by group or others (mode {mode:o}): another user could replace "
            f"what statekeep reads there. Fix: chmod go-w '{path}'"
        )


def read_marker(io: OsIO, root: int, path: str) -> dict[str, Any] | None:
    """The store marker's contents, or None if the folder has none."""
    where = os.path.join(path, MARKER)
    try:
        fd = io.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CorruptStateError(f"{where} is a symbolic link; not followed") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CorruptStateError(f"{where} is not a file; statekeep writes its store marker as one")
        check_owner(fd, where)
        raw = io.read_all(fd)
    finally:
        os.close(fd)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptStateError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(value, dict) or not isinstance(value.get("format"), int):
        raise CorruptStateError(f"{where} is not a JSON object with a 'format' number")
    spaces = value.get("namespaces", [])
    if not isinstance(spaces, list) or not all(isinstance(n, str) for n in spaces):
        raise CorruptStateError(f"{where} has a 'namespaces' that is not a list of names")
    if value["format"] > MARKER_FORMAT:
        raise UnsupportedFormatError(
            f"{path} was written by a newer statekeep (store format {value['format']}; this one "
            f"reads up to {MARKER_FORMAT}): upgrade statekeep to use it. Nothing was changed"
        )
    return value


def write_marker(io: OsIO, root: int, namespaces: list[str] | None = None) -> None:
    """Write the marker durably: a temporary file (0600) fsync'd, renamed, folder fsync'd.
    ``namespaces``: those with a folder in the store (named in the marker when any)."""
    tmp = f"{MARKER_TMP}{secrets.token_hex(6)}"
    marker: dict[str, Any] = {"format": MARKER_FORMAT}
    if namespaces:
        marker["namespaces"] = sorted(namespaces)
    try:
        write_file(io, root, tmp, orjson.dumps(marker), exclusive=True)
        io.rename(tmp, MARKER, dir_fd=root)
    except BaseException:
        try:
            io.unlink(tmp, dir_fd=root)
        except OSError:
            pass
        raise
    io.fsync(root)


def probe_case(root: int) -> bool:
    """Is the folder case-insensitive? (The marker found under its name in capitals.)"""
    try:
        upper = os.stat(MARKER.upper(), dir_fd=root, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.stat(MARKER, dir_fd=root, follow_symlinks=False)
    return (upper.st_dev, upper.st_ino) == (mine.st_dev, mine.st_ino)


def foreign_files(folder: int) -> list[str]:
    """What a State's folder holds besides a State's own files, sorted."""
    with os.scandir(folder) as it:
        return sorted(e.name for e in it if e.name not in STATE_FILES or not e.is_file(follow_symlinks=False))


# Files an operating system's file browser leaves in any folder it shows.
_OS_LITTER = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})


def check_adoptable(io: OsIO, root: int, path: str) -> None:
    """Refuse a folder without a marker unless it holds only States and statekeep's leftovers.

    Stores written before the marker existed hold just that; anything else means the
    path names some other folder, which a store must not write to or delete from.
    """
    strangers: list[str] = []
    with os.scandir(root) as it:
        entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    for name, is_dir in sorted(entries):
        if not is_dir and (name == MARKER or name.startswith(MARKER_TMP) or name in _OS_LITTER):
            continue  # the marker (another process may just have marked it), or OS litter

        if not is_dir or not (name.startswith((CREATING, DELETING)) or _is_id(name)):
            strangers.append(name)
            continue
        try:
            folder = io.open(name, DIR, dir_fd=root)
        except FileNotFoundError:
            continue  # removed meanwhile
        try:
            strangers += [f"{name}/{inner}" for inner in foreign_files(folder)]
        finally:
            os.close(folder)
    if strangers:
        shown = ", ".join(repr(s) for s in strangers[:5])
        more = f" and {len(strangers) - 5} more" if len(strangers) > 5 else ""
        raise NotAStoreError(
            f"{path} is not a statekeep store: it has no {MARKER} marker and holds {shown}{more}, "
            "which are not States",
            "Pass an empty or new folder as the store (statekeep creates it)",
        )


def _is_id(name: str) -> bool:
    try:
        validate_id(name)
    except ValueError:
        return False
    return True
