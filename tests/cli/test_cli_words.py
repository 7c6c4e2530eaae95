"""The CLI speaks in flags and full paths: no advice meant for Python callers
(``create=False``, ``or None``, ``str``), and a file it could not read or change named by
its full path, never a bare ``'log.jsonl'``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from statekeep import FileStore, State
from statekeep.cli import main

AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
PYTHON_WORDS = ("create=", "None", " str", "int from", ".next", "id_prefix", "labels ")


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stderr


def saved(folder: Path, *ids: str) -> str:
    with FileStore(folder) as store:
        for sid in ids:
            store.save(State(f"task of {sid}", id=sid))
    return str(folder)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["list", "--limit", "0"], "--limit"),
        (["list", "--limit", "100000"], "--limit"),
        (["list", "--agent", ""], "--agent"),
        (["list", "--status", ""], "--status"),
        (["list", "--parent", ""], "--parent"),
        (["list", "--after", "garbage"], "--after"),
        (["list", "--label", "=x"], "--label"),
        (["export", "--all", "-o", "-", "--agent", ""], "--agent"),
        (["export", "--all", "-o", "-", "--status", ""], "--status"),
    ],
)
def test_a_bad_option_is_named_as_a_flag(args: list[str], flag: str, tmp_path: Path) -> None:
    store = saved(tmp_path / "store", "one")
    code, err = cli(*args, "--store", store)
    assert code == 2 and flag in err, err
    assert not any(words in err for words in PYTHON_WORDS), err


def test_fork_onto_a_taken_id_says_which_flag_to_change(tmp_path: Path) -> None:
    store = saved(tmp_path / "store", "one", "two")
    code, err = cli("fork", "one", "--new-id", "two", "--store", store)
    assert code == 2 and "'two' already exists" in err and "--new-id" in err, err
    assert not any(words in err for words in PYTHON_WORDS), err


def test_show_of_a_missing_state_speaks_no_python(tmp_path: Path) -> None:
    store = saved(tmp_path / "store", "one")
    code, err = cli("show", "nobody", "--store", store)
    assert code == 1 and "no State 'nobody'" in err and "create=" not in err, err


@pytest.fixture
def read_only_copy(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A store (one State, 'one'), and the same folder bind-mounted read-only: what a
    write meets on a read-only disk, even as root. Needs root; required under CI."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root so that the read-only mount test runs; it is not root here")
        pytest.skip("a read-only bind mount needs root")
    saved(tmp_path / "src" / "store", "one")
    mnt = tmp_path / "ro"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "--bind", str(tmp_path / "src"), str(mnt)], capture_output=True, text=True
    )
    if done.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"could not bind-mount: {done.stderr.strip()}")
        pytest.skip(f"could not bind-mount (no CAP_SYS_ADMIN?): {done.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mnt)], check=True)
        yield tmp_path / "src" / "store", mnt / "store"
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize("command", [["delete", "one", "--yes"], ["fork", "one", "--new-id", "two"]])
def test_a_read_only_store_is_named_by_full_paths(
    read_only_copy: tuple[Path, Path], command: list[str]
) -> None:
    _, store = read_only_copy
    code, err = cli(*command, "--store", str(store))
    assert code == 1 and "Read-only file system" in err, err
    names = [part.strip("',") for part in err.split() if part.startswith("'")]
    assert names and all(name.startswith(f"{store}/") for name in names), err


def test_an_unreadable_log_is_named_by_its_full_path() -> None:
    """As root, file modes are no obstacle: the command runs as 'nobody' over a store of
    its own whose State's log has mode 000."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the command as another user")
    top = Path(tempfile.mkdtemp(prefix="statekeep-perm-"))  # not under pytest's 0700 folders
    try:
        os.chmod(top, 0o755)
        store = top / "store"
        saved(store, "one")
        for folder, _, names in os.walk(store):
            os.chown(folder, 65534, 65534)
            for name in names:
                os.chown(os.path.join(folder, name), 65534, 65534)
        log = store / "one" / "log.jsonl"
        os.chmod(log, 0)
        proc = subprocess.run(
            [*AS_NOBODY, sys.executable, "-m", "statekeep", "show", "one", "--store", str(store)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "HOME": str(top)},
        )
        assert proc.returncode == 1 and "Permission denied" in proc.stderr, proc.stderr
        assert f"'{log}'" in proc.stderr, proc.stderr
    finally:
        shutil.rmtree(top)
