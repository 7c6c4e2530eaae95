"""FileStore trusts only what it owns: the store marker, owners and modes, leftovers' locks.

Tests run as root, so another user's files are made with ``os.chown`` to uid 65534.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeep import CorruptStateError, FileStore, Record, open_store
from statekeep.stores import OsIO
from statekeep.testing import entries, snapshot
from tests.support import REPO

NOBODY = 65534
MARKER = ".statekeep-store"
ROOT = REPO


def make_store(path: Path, *ids: str) -> FileStore:
    store = FileStore(path)
    for sid in ids:
        store.write(sid, entries(0, 1), snapshot(sid), create=True)
    return store


# -- item 2: owners and modes ---------------------------------------------------------


def test_a_store_folder_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    make_store(root, "a")
    os.chown(root, NOBODY, -1)
    with pytest.raises(PermissionError, match=rf"{root} is owned by uid {NOBODY}.*chown") as info:
        FileStore(root).read("a")
    from statekeep import UnsafeStoreError

    assert isinstance(info.value, UnsafeStoreError)
    with pytest.raises(PermissionError, match="chown"):
        FileStore(root).list()
    with pytest.raises(PermissionError, match="chown"):
        FileStore(root).write("a", entries(1, 1), None)
    os.chown(root, os.geteuid(), -1)  # the fix the message names
    assert FileStore(root).read("a") == Record(entries(0, 1), snapshot("a"))


def test_a_store_folder_writable_by_group_or_others_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    make_store(root, "a")
    for bad in (0o770, 0o702, 0o777):
        os.chmod(root, bad)
        with pytest.raises(PermissionError, match=rf"{root} is writable by group or others.*chmod go-w"):
            FileStore(root).read("a")
    os.chmod(root, 0o755)  # readable by others is fine: only writing lets them swap a State
    assert FileStore(root).read("a") is not None


def test_a_state_planted_by_another_user_is_refused_and_left_out_of_the_listing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    make_store(root, "mine", "planted")
    os.chown(root / "planted", NOBODY, -1)
    with pytest.raises(PermissionError, match=rf"{root / 'planted'} is owned by uid {NOBODY}"):
        FileStore(root).read("planted")
    with pytest.raises(PermissionError):
        FileStore(root).write("planted", entries(1, 1), None)
    with pytest.raises(PermissionError):
        FileStore(root).delete("planted")
    with pytest.warns(RuntimeWarning, match="'planted' left out of the listing.*owned by uid"):
        assert [r.id for r in FileStore(root).list()] == ["mine"]
    assert FileStore(root).read("mine") == Record(entries(0, 1), snapshot("mine"))


@pytest.mark.parametrize("name", ["log.jsonl", "snapshot.json"])
@pytest.mark.parametrize("how", ["owner", "mode"])
def test_a_state_file_another_user_can_change_is_refused(tmp_path: Path, name: str, how: str) -> None:
    root = tmp_path / "s"
    make_store(root, "a")
    path = root / "a" / name
    if how == "owner":
        os.chown(path, NOBODY, -1)
        message = f"{path} is owned by uid {NOBODY}"
    else:
        os.chmod(path, 0o620)
        message = f"{path} is writable by group or others"
    with pytest.raises(PermissionError, match=message):
        FileStore(root).read("a")
    before = path.read_bytes()
    if name == "log.jsonl":  # an append opens the log first
        with pytest.raises(PermissionError, match=message):
            FileStore(root).write("a", entries(1, 1), snapshot("a", turn=1))
        assert path.read_bytes() == before


def test_a_state_folder_writable_by_others_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    make_store(root, "a")
    os.chmod(root / "a", 0o730)
    with pytest.raises(PermissionError, match=rf"{root / 'a'} is writable by group or others"):
        FileStore(root).read("a")


def test_a_marker_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    make_store(root, "a")
    os.chown(root / MARKER, NOBODY, -1)
    with pytest.raises(PermissionError, match=rf"{root / MARKER} is owned by uid {NOBODY}"):
        FileStore(root).read("a")


# -- item 7: leftovers are judged by their creator's lock, not by a pid ---------------


HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()  # hold the lock until the parent closes our stdin
"""


@pytest.fixture
def lock_holder() -> Iterator[object]:
    procs: list[subprocess.Popen[str]] = []

    def hold(folder: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def leftover(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(mode=0o700)
    (folder / "log.jsonl").write_bytes(b'{"seq":0}\n')
    return folder


@pytest.mark.parametrize("prefix", [".creating-", ".deleting-"])
def test_a_leftover_whose_creator_holds_its_lock_is_kept_whatever_its_name(
    tmp_path: Path, prefix: str, lock_holder: object
) -> None:
    make_store(tmp_path, "a")
    # A pid from another PID namespace (a container sharing the folder) looks dead here.
    busy = leftover(tmp_path, f"{prefix}{dead_pid()}-aa")
    holder = lock_holder(busy)  # type: ignore[operator]
    FileStore(tmp_path).delete("nobody")  # a delete (or write) sweeps leftovers
    assert busy.exists()
    holder.kill()
    holder.wait()
    FileStore(tmp_path).delete("nobody")
    assert not busy.exists()
    assert [r.id for r in FileStore(tmp_path).list()] == ["a"]


@pytest.mark.parametrize("prefix", [".creating-", ".deleting-"])
def test_a_leftover_whose_lock_is_free_is_removed_even_if_its_pid_is_alive(
    tmp_path: Path, prefix: str
) -> None:
    make_store(tmp_path, "a")
    # After a reboot a leftover's pid can belong to a live, unrelated process.
    stale = leftover(tmp_path, f"{prefix}{os.getppid()}-bb")
    own = leftover(tmp_path, f"{prefix}{os.getpid()}-cc")
    store = FileStore(tmp_path)
    assert [r.id for r in store.list()] == ["a"]
    assert stale.exists() and own.exists()  # reads never write, not even to clean up
    store.delete("nobody")
    assert not stale.exists() and not own.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [MARKER, "a"]


SWEEP = "from statekeep import FileStore; import sys; FileStore(sys.argv[1]).delete('nobody')"


class SweepMidway(OsIO):
    """Lets another process open the store (and sweep) at one point of a create or delete."""

    def __init__(self, root: Path, when: str) -> None:
        self.root, self.when = root, when
        self.before: list[str] = []
        self.after: list[str] = []

    def _leftovers(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.name.startswith((".creating-", ".deleting-")))

    def _sweep_now(self) -> None:
        self.before = self._leftovers()
        subprocess.run([sys.executable, "-c", SWEEP, str(self.root)], check=True, cwd=ROOT)
        self.after = self._leftovers()

    def mkdir(self, name: str, *, dir_fd: int) -> None:
        super().mkdir(name, dir_fd=dir_fd)
        if self.when == "made" and name.startswith(".creating-"):
            self._sweep_now()  # the folder exists, and is not locked yet

    def rename(self, src: str, dst: str, *, dir_fd: int) -> None:
        if self.when == "create" and src.startswith(".creating-"):
            self._sweep_now()
        super().rename(src, dst, dir_fd=dir_fd)

    def rmdir(self, name: str, *, dir_fd: int) -> None:
        if self.when == "delete" and name.startswith(".deleting-"):
            self._sweep_now()
        super().rmdir(name, dir_fd=dir_fd)


@pytest.mark.parametrize("when", ["made", "create"])
def test_a_create_in_progress_is_not_swept_by_another_process(tmp_path: Path, when: str) -> None:
    make_store(tmp_path, "a")
    io = SweepMidway(tmp_path, when)
    FileStore(tmp_path, io=io).write("b", entries(0, 2), snapshot("b"), create=True)
    assert len(io.before) == 1 and io.after == io.before
    assert FileStore(tmp_path).read("b") == Record(entries(0, 2), snapshot("b"))


def test_a_delete_in_progress_is_not_swept_by_another_process(tmp_path: Path) -> None:
    make_store(tmp_path, "a", "b")
    io = SweepMidway(tmp_path, "delete")
    FileStore(tmp_path, io=io).delete("b")
    assert len(io.before) == 1 and io.after == io.before
    assert sorted(p.name for p in tmp_path.iterdir()) == [MARKER, "a"]


# -- item 14: a store folder is marked; other folders are not trusted with deletes -----


def test_an_empty_store_path_is_a_value_error() -> None:
    for make in (FileStore, open_store):
        with pytest.raises(ValueError, match="empty"):
            make("")


def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "main.py").write_text("print('precious')\n")
    (folder / "README.md").write_text("# mine\n")
    return folder


def test_a_folder_that_is_not_a_store_is_refused_and_nothing_is_deleted(tmp_path: Path) -> None:
    folder = project(tmp_path)
    message = rf"{folder} is not a statekeep store.*'README\.md'.*'src/main\.py'.*empty or new folder"
    with pytest.raises(ValueError, match=message):
        open_store(str(folder)).delete("src")
    for act in (
        lambda s: s.read("src"),
        lambda s: s.list(),
        lambda s: s.write("new", entries(0, 1), snapshot(), create=True),
    ):
        with pytest.raises(ValueError, match=message):
            act(FileStore(folder))
    assert (folder / "src" / "main.py").read_text() == "print('precious')\n"
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "src"]


def test_a_folder_of_states_with_a_stray_file_inside_one_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    make_store(root, "a", "src")
    (root / MARKER).unlink()  # as a store written before the marker existed
    (root / "src" / "main.py").write_text("mine")
    with pytest.raises(ValueError, match=r"not a statekeep store.*'src/main\.py'"):
        FileStore(root).delete("src")
    assert (root / "src" / "main.py").read_text() == "mine"


def test_delete_refuses_a_folder_that_holds_more_than_a_state(tmp_path: Path) -> None:
    root = tmp_path / "s"
    make_store(root, "a")
    (root / "a" / "notes.txt").write_text("mine")
    (root / "a" / "sub").mkdir()
    with pytest.raises(CorruptStateError, match=rf"{root / 'a'} holds 'notes\.txt', 'sub'.*not deleted"):
        FileStore(root).delete("a")
    assert (root / "a" / "notes.txt").read_text() == "mine"
    assert FileStore(root).read("a") == Record(entries(0, 1), snapshot("a"))


def read_marker(root: Path) -> dict:
    assert stat.S_IMODE((root / MARKER).stat().st_mode) == 0o600
    return json.loads((root / MARKER).read_bytes())


def test_a_new_store_is_marked_when_it_is_created(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "s"
    make_store(root, "a")
    assert read_marker(root) == {"format": 2}
    assert sorted(p.name for p in root.iterdir()) == [MARKER, "a"]


def test_a_store_of_an_earlier_version_is_adopted_and_marked_on_its_first_write(tmp_path: Path) -> None:
    root = tmp_path / "s"
    make_store(root, "a", "b")
    (root / MARKER).unlink()
    leftover(root, ".creating-1-aa")
    (root / ".DS_Store").write_bytes(b"\0")  # a file browser's litter does not stop adoption
    (root / "b" / "snapshot.json.tmp").write_bytes(b"{")
    os.chmod(root / "b" / "snapshot.json.tmp", 0o600)
    # Reading, listing and a read-only store never write the marker.
    assert FileStore(root, read_only=True).read("a") == Record(entries(0, 1), snapshot("a"))
    assert [r.id for r in FileStore(root, read_only=True).list()] == ["a", "b"]
    assert FileStore(root).read("b") is not None
    assert [r.id for r in FileStore(root).list()] == ["a", "b"]
    assert (root / ".creating-1-aa").exists()  # reads do not sweep
    assert not (root / MARKER).exists()
    store = FileStore(root)
    store.write("a", entries(1, 1), None)  # an append is a write
    assert read_marker(root) == {"format": 2}
    # Once marked, the store is not scanned again: other things inside are left alone.
    (root / "notes.txt").write_text("mine")
    assert [r.id for r in FileStore(root).list()] == ["a", "b"]


def test_an_empty_folder_is_marked_on_its_first_write(tmp_path: Path) -> None:
    assert FileStore(tmp_path).read("a") is None
    assert list(tmp_path.iterdir()) == []
    make_store(tmp_path, "a")
    assert read_marker(tmp_path) == {"format": 2}


def test_a_read_only_store_never_writes(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s", read_only=True)
    with pytest.raises(RuntimeError, match="read_only"):
        store.write("a", entries(0, 1), snapshot(), create=True)
    assert not (tmp_path / "s").exists()
    make_store(tmp_path / "s", "a")
    with pytest.raises(RuntimeError, match="read_only"):
        store.write("a", entries(1, 1), None)
    with pytest.raises(RuntimeError, match="read_only"):
        store.delete("a")
    assert store.read("a") == Record(entries(0, 1), snapshot("a"))


def test_a_damaged_marker_is_an_error_naming_it(tmp_path: Path) -> None:
    make_store(tmp_path, "a")
    (tmp_path / MARKER).write_bytes(b"[1, 2")
    with pytest.raises(CorruptStateError, match=rf"{tmp_path / MARKER}"):
        FileStore(tmp_path).read("a")


CASE_PROBE = textwrap.dedent(
    """
    import sys
    from statekeep import FileStore
    store = FileStore(sys.argv[1])
    store.write("a", [], None, create=True)
    print(store.case_insensitive)
    """
)


def test_case_sensitivity_of_the_folder_is_detected(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CASE_PROBE, str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.stdout == "False\n"  # ext4 and tmpfs here; macOS's default APFS would say True


class FoldedStore(FileStore):
    """A FileStore that believes its folder is case-insensitive (no such file system here)."""

    def _probe_case(self, root: int) -> bool:
        return True


def test_on_a_case_insensitive_folder_exact_ids_still_work(tmp_path: Path) -> None:
    store = FoldedStore(tmp_path)
    store.write("Run-1", entries(0, 1), snapshot("x"), create=True)
    store.write("Run-1", entries(1, 1), snapshot("x", turn=1))
    assert store.read("Run-1") == Record(entries(0, 2), snapshot("x", turn=1))
    assert store.read("run-1") is None
    assert [r.id for r in store.list()] == ["Run-1"]
    store.delete("Run-1")
    assert store.read("Run-1") is None
