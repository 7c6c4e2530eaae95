"""Model-based tests of FileStore: the kit's state machine (statekeep.testing.StoreMachine,
run by tests/store/test_conformance.py for every store) with FileStore's own invariant, and the
FileStore cases found while building the model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis.stateful import invariant

from statekeep import FileStore, MemoryStore, StateConflictError, Store
from statekeep.testing import StoreMachine, snapshot


class FileMachine(StoreMachine):
    """FileStore in a fresh folder; the kit's machine re-opens the folder with a new instance
    mid-run, and lets short-lived second instances write, create and delete (as another process
    would) between the main instance's calls, which exercises its cached view of each log."""

    @invariant()
    def folder_holds_only_states(self) -> None:
        path = self.folder / "store"
        if not path.exists():
            assert not self.model
            return
        names = sorted(n for n in os.listdir(path) if n != ".statekeep-store")
        assert names == sorted(self.model), names  # no leftover .creating-/.deleting- folders
        for sid in names:
            files = set(os.listdir(path / sid))
            if self.model[sid][1] is None:
                assert files == {"log.jsonl"}, (sid, files)
            else:
                # snapshot.json is a copy of the log's snapshot, refreshed lazily (at most every
                # 0.5 s per State inline, else by a timer): it may lag, and reads never need it.
                assert "log.jsonl" in files and files <= {"log.jsonl", "snapshot.json"}, (sid, files)


# -- found while building the model -----------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "file"])
@pytest.mark.parametrize(
    ("stored", "sent"),
    [(1, True), (0, False), (1, 1.0), ([1, 0], [True, False]), ({"n": 2}, {"n": 2.0})],
    ids=["1-vs-true", "0-vs-false", "1-vs-1.0", "list-of-bools", "nested-float"],
)
def test_entry_differing_only_in_json_type_is_a_conflict(
    tmp_path: Path, kind: str, stored: Any, sent: Any
) -> None:
    store: Store = MemoryStore() if kind == "memory" else FileStore(tmp_path / "store")
    store.write("x", [{"seq": 0, "v": stored}], None, create=True)
    with pytest.raises(StateConflictError):
        store.write("x", [{"seq": 0, "v": sent}, {"seq": 1}], None)
    assert store.read("x").entries == [{"seq": 0, "v": stored}]


def test_stale_instance_after_delete_and_recreate_keeps_the_new_state(tmp_path: Path) -> None:
    path = tmp_path / "store"
    log = path / "x" / "log.jsonl"
    first, second = FileStore(path), FileStore(path)  # e.g. two processes sharing the folder
    for attempt in range(50):
        second.delete("x")
        first.write("x", [{"seq": 0, "text": "short"}], None, create=True)  # first caches the log's tail
        cached_inode = os.stat(log).st_ino
        second.delete("x")  # another process resets the run
        second.write("x", [{"seq": 0, "text": f"a longer first entry {attempt} " * 20}], None, create=True)
        if os.stat(log).st_ino == cached_inode:
            break
    else:
        pytest.skip("the file system did not reuse the inode; the bug needs that to show")
    acknowledged = second.read("x").entries
    try:
        first.write("x", [{"seq": 1, "text": "next"}], None)
    except (ValueError, LookupError):
        pass  # refusing is fine; destroying what is stored is not
    assert FileStore(path).read("x").entries[:1] == acknowledged


@pytest.mark.parametrize("how", ["snapshot-only", "nothing", "resend-stored"])
def test_write_appending_nothing_keeps_the_next_seq(tmp_path: Path, how: str) -> None:
    store = FileStore(tmp_path / "store")
    store.write("x", [{"seq": 0}, {"seq": 1}], snapshot(), create=True)
    if how == "snapshot-only":
        store.write("x", [], snapshot(turn=1))
    elif how == "nothing":
        store.write("x", [], None)
    else:
        store.write("x", [{"seq": 0}], None)  # an idempotent retry of an acknowledged write
    store.write("x", [{"seq": 2}], None)  # the next entry
    store.write("x", [{"seq": 1}], None)  # a retry: skipped, never stored twice
    with pytest.raises(StateConflictError):
        store.write("x", [{"seq": 1, "other": True}], None)
    assert FileStore(tmp_path / "store").read("x").entries == [{"seq": 0}, {"seq": 1}, {"seq": 2}]
