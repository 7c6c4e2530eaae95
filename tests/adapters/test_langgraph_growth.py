"""StatekeepSaver stores what changed: each channel value once per version, a growing list as
what it appends; old threads still read; prune and delete_for_runs reclaim space crash-safely
(a real SIGKILL at every step of the rewrite)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from statekeep import FileStore, SQLiteStore, Store
from statekeep._core.errors import UnsupportedFormatError
from tests.support import REPO
from tests.support.frameworks import require_installed

require_installed("langgraph", "1.2.22")

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.channels import DeltaChannel  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

from statekeep.adapters._langgraph_history import Thread, pack  # noqa: E402
from statekeep.adapters._langgraph_values import channels  # noqa: E402
from statekeep.adapters.langgraph import StatekeepSaver  # noqa: E402


class Chat(TypedDict):
    messages: Annotated[list[Any], add_messages]
    turns: int


def reply(state: Chat) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage("answer " + "x" * 500, id=f"ai-{n}")], "turns": state.get("turns", 0) + 1}


def chat(saver: Any) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def talk(graph: Any, steps: range, thread: str = "t") -> None:
    for step in steps:
        say = HumanMessage(f"question {step} " + "y" * 500, id=f"human-{step}")
        graph.invoke({"messages": [say]}, {"configurable": {"thread_id": thread}})


def view(saver: Any, thread: str = "t") -> list[Any]:
    """Every checkpoint of the thread as LangGraph sees it (ids aside: they differ per saver)."""
    return [
        (t.checkpoint["channel_values"], t.metadata.get("step"), [w[1:] for w in t.pending_writes or []])
        for t in saver.list({"configurable": {"thread_id": thread}})
    ]


def stored_bytes(store: Store) -> int:
    return sum(len(json.dumps(e)) for row in store.list() for e in store.read(row.id).entries)  # type: ignore[union-attr]


def test_every_checkpoint_reads_back_as_inmemorysaver_shows_it(store: Store) -> None:
    ours, reference = StatekeepSaver(store), InMemorySaver()
    for saver in (ours, reference):
        talk(chat(saver), range(12))
    assert view(ours) == view(reference)
    fresh = StatekeepSaver(store)  # another process: nothing cached
    talk(chat(fresh), range(12, 15))
    talk(chat(reference), range(12, 15))
    assert view(StatekeepSaver(store)) == view(reference)


def test_a_growing_message_list_is_stored_as_what_it_appends_so_bytes_grow_linearly(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    saver = StatekeepSaver(store)
    graph = chat(saver)
    talk(graph, range(40))
    at_40 = stored_bytes(saver.store)
    talk(graph, range(40, 80))
    at_80 = stored_bytes(saver.store)
    newest = saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert newest is not None and len(newest.checkpoint["channel_values"]["messages"]) == 160
    whole = len(saver.serde.dumps_typed(newest.checkpoint["channel_values"]["messages"])[1]) * 4 / 3  # base64
    assert (
        at_80 < 3 * at_40
    )  # linear (2x once past the first full copies); whole lists in every checkpoint: 4x
    # each step writes 4 checkpoints and the messages twice more as pending writes: a few
    # copies of the newest list in all, where whole lists in every checkpoint would be ~160
    assert at_80 < 12 * whole, (at_80, whole)
    record = saver.store.read("t")
    assert record is not None and record.snapshot["langgraph"]["format"] == 2
    entries = [e for e in record.entries if e["kind"] == "lg.checkpoint"]
    assert sum("messages" in e.get("deltas", {}) for e in entries) > sum(
        "messages" in e["values"] for e in entries
    )
    store.close()


def test_branches_with_equal_versions_keep_their_own_values(store: Store) -> None:
    """Going back to an older checkpoint and going on from it makes the same channel versions
    as the line it left: a value is referred to unchanged only along one line."""
    ours, reference = StatekeepSaver(store), InMemorySaver()
    for saver in (ours, reference):
        graph = chat(saver)
        talk(graph, range(3))
        history = list(saver.list({"configurable": {"thread_id": "t"}}))
        back = history[3].config  # mid-way: fork from there, twice
        for text in ("left", "right"):
            graph.invoke({"messages": [HumanMessage(text, id=text)]}, back)
        talk(graph, range(3, 5))
    assert view(ours) == view(reference)


def test_the_newest_checkpoint_is_read_from_its_values_last_full_copy(tmp_path: Path) -> None:
    reads: list[int] = []

    class Counting(SQLiteStore):
        def read(self, state_id: str, *, since: int = 0) -> Any:
            reads.append(since)
            return super().read(state_id, since=since)

    store = Counting(tmp_path / "s.db", namespace="lg")
    talk(chat(StatekeepSaver(store)), range(30))
    record = store.read("t")
    assert record is not None
    last_full = max(e["seq"] for e in record.entries if "messages" in (e.get("values") or {}))
    reads.clear()
    newest = StatekeepSaver(store).get_tuple({"configurable": {"thread_id": "t"}})
    assert newest is not None and len(newest.checkpoint["channel_values"]["messages"]) == 60
    assert 0 < reads[-1] <= last_full  # from the chain's start on: not from the beginning
    store.close()


def test_the_newest_checkpoint_read_from_its_chain_is_what_the_whole_history_gives(store: Store) -> None:
    """``get_tuple`` of the newest checkpoint folds, of what it reads from its chain's start,
    only that checkpoint, its writes and the entries holding values: the other checkpoints
    and writes in that range are skipped, and the tuple is the one a read of it all gives."""
    saver = StatekeepSaver(store)
    graph = chat(saver)
    talk(graph, range(25))
    config: Any = {"configurable": {"thread_id": "t"}}
    head = saver.get_tuple(config)
    assert head is not None
    saver.put_writes(head.config, [("messages", [HumanMessage("pending", id="p")])], "task-1")
    saver.put_writes(head.config, [("turns", 7)], "task-2", "path")
    record = saver.store.read("t")
    assert record is not None
    start = record.snapshot["langgraph"]["heads"][""][0]
    skipped = [
        e
        for e in record.entries
        if e["seq"] >= start
        and e.get("id", e.get("checkpoint")) != head.config["configurable"]["checkpoint_id"]
    ]
    assert {e["kind"] for e in skipped} >= {"lg.checkpoint", "lg.writes", "lg.tip"}  # some to skip
    for reader in (saver, StatekeepSaver(store)):  # its heads cached, and nothing cached
        got = reader.get_tuple(config)
        whole = next(iter(reader.list(config)))  # folded from the whole history
        assert (
            got is not None
            and got.checkpoint["channel_values"]["messages"] == whole.checkpoint["channel_values"]["messages"]
        )
        assert (got.config, got.checkpoint, got.metadata, got.parent_config) == (
            whole.config,
            whole.checkpoint,
            whole.metadata,
            whole.parent_config,
        )
        assert got.pending_writes == whole.pending_writes
        assert [w[1:] for w in got.pending_writes or []] == [
            ("messages", [HumanMessage("pending", id="p")]),
            ("turns", 7),
        ]
        assert len(got.checkpoint["channel_values"]["messages"]) == 50


def test_a_thread_written_in_format_1_reads_and_goes_on_in_format_2(store: Store) -> None:
    saver = StatekeepSaver(store)
    talk(chat(saver), range(3))
    expected = view(saver)
    # the same thread as the format 1 adapter wrote it: every value whole in every checkpoint
    record = saver.store.read("t")
    assert record is not None
    thread = Thread.fold(record.entries)
    old_entries = []
    for entry in record.entries:
        if entry["kind"] == "lg.checkpoint":
            values = {
                c: pack(saver.serde.dumps_typed(thread.value(saver.serde, entry, c))) for c in channels(entry)
            }
            entry = {k: v for k, v in entry.items() if k not in ("values", "refs", "deltas", "from")}
            entry["values"] = values
        old_entries.append(entry)
    snapshot = dict(record.snapshot or {})
    mark = dict(snapshot["langgraph"])
    for key in ("gen", "known", "bytes"):
        mark.pop(key)
    mark["format"] = 1
    snapshot["langgraph"] = mark
    store.write("old", old_entries, dict(snapshot, task="old"), create=True)
    assert view(StatekeepSaver(store), "old") == expected
    talk(chat(StatekeepSaver(store)), range(3, 4), thread="old")
    talk(chat(saver), range(3, 4))
    assert view(StatekeepSaver(store), "old") == view(saver)
    assert store.read("old").snapshot["langgraph"]["format"] == 2  # type: ignore[union-attr]


def test_a_thread_of_a_newer_format_is_refused_untouched(store: Store) -> None:
    saver = StatekeepSaver(store)
    talk(chat(saver), range(1))
    record = store.read("t")
    assert record is not None and record.snapshot is not None
    newer = dict(record.snapshot, langgraph=dict(record.snapshot["langgraph"], format=3))
    store.write("t", [], newer)
    with pytest.raises(UnsupportedFormatError, match="upgrade statekeep"):
        StatekeepSaver(store).get_tuple({"configurable": {"thread_id": "t"}})
    assert store.read("t").entries == record.entries  # type: ignore[union-attr]


class Counted(TypedDict):
    items: Annotated[
        list[str],
        DeltaChannel(lambda state, writes: [*state, *(x for w in writes for x in w)], snapshot_frequency=3),
    ]


def test_prune_keeps_the_ancestors_a_deltachannel_is_rebuilt_from(store: Store) -> None:
    def add(state: Counted) -> dict[str, Any]:
        return {"items": [f"item {len(state['items'])}"]}

    builder = StateGraph(Counted)
    builder.add_node("add", add)
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    saver = StatekeepSaver(store)
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "d"}}
    for _ in range(8):
        graph.invoke({"items": []}, config)
    before = graph.get_state(config).values
    assert len(before["items"]) == 8
    assert len(list(saver.list(config))) == 24
    saver.prune(["d"])
    kept = len(list(saver.list(config)))
    assert 1 < kept < 24  # the newest and its ancestors back to the last snapshot of ``items``
    assert graph.get_state(config).values == before
    graph.invoke({"items": []}, config)
    assert graph.get_state(config).values["items"] == [*before["items"], "item 8"]


def test_delete_for_runs_keeps_the_values_the_checkpoints_left_refer_to(store: Store) -> None:
    ours, reference = StatekeepSaver(store), InMemorySaver()
    for saver in (ours, reference):
        graph = chat(saver)
        for run in ("r1", "r2", "r3"):
            say = HumanMessage(run + " " + "z" * 300, id=run)
            graph.invoke(
                {"messages": [say]},
                {"configurable": {"thread_id": "t", "run_id": run}},
            )
    run_ids = ["r2"]
    ours.delete_for_runs(run_ids)
    kept = [
        t
        for t in reference.list({"configurable": {"thread_id": "t"}})
        if t.metadata.get("run_id") not in run_ids
    ]
    assert view(ours) == [
        (t.checkpoint["channel_values"], t.metadata.get("step"), [w[1:] for w in t.pending_writes or []])
        for t in kept
    ]
    assert 0 < len(view(ours)) < len(view(reference))


# -- crash safety: a real SIGKILL before each store call of a prune -------------------------

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from statekeep import FileStore, SQLiteStore
    from statekeep.adapters import _langgraph_lease
    from statekeep.adapters.langgraph import StatekeepSaver

    _langgraph_lease.TTL = 1.0  # a killed prune's lease holds the thread's next one up this long
    kind, path, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = SQLiteStore(path, namespace="lg") if kind == "sqlite" else FileStore(path, namespace="lg")
    calls = 0

    def counting(name):
        real = getattr(store, name)

        def call(*args, **kwargs):
            global calls
            calls += 1
            if calls == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        return call

    store.write = counting("write")
    store.delete = counting("delete")
    StatekeepSaver(store).prune(["t"])
    print(calls)
    """
)


def open_store(kind: str, path: Path) -> Store:
    return SQLiteStore(path, namespace="lg") if kind == "sqlite" else FileStore(path, namespace="lg")


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_a_prune_killed_before_any_of_its_store_calls_leaves_the_thread_as_before_or_after(
    kind: str, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    store = open_store(kind, source / "s.db" if kind == "sqlite" else source)
    talk(chat(StatekeepSaver(store)), range(6))
    before = view(StatekeepSaver(store))
    life = StatekeepSaver(store).thread_life("t")  # its tools' keys' part: kept by both moves
    assert life is not None
    store.close()
    done = tmp_path / "done"
    shutil.copytree(source, done)
    path = (done / "s.db") if kind == "sqlite" else done
    finished = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(path), "0"], cwd=REPO, capture_output=True, text=True
    )
    assert finished.returncode == 0, finished.stderr
    steps = int(finished.stdout)
    # there and back: create the other State, commit, clear the mark, delete the old one; the
    # same home (no other State is left to delete before either create)
    assert steps == 8
    store = open_store(kind, path)
    after = view(StatekeepSaver(store))
    store.close()
    assert len(after) == 1 and after[0] == before[0]
    for kill_at in range(1, steps + 1):
        for attempt in ("killed", "again"):
            work = tmp_path / f"kill-{kill_at}"
            if attempt == "killed":
                shutil.copytree(source, work)
            path = (work / "s.db") if kind == "sqlite" else work
            proc = subprocess.run([sys.executable, "-c", CHILD, kind, str(path), str(kill_at if attempt == "killed" else 0)],
                                  cwd=REPO, capture_output=True, text=True)  # fmt: skip
            if attempt == "killed":
                assert proc.returncode == -9, proc.stderr
            else:
                assert proc.returncode == 0, proc.stderr
            store = open_store(kind, path)
            saver = StatekeepSaver(store)
            seen = view(saver)
            assert seen in (before, after), f"killed before store call {kill_at}"
            assert StatekeepSaver(store).thread_life("t") == life, f"killed before store call {kill_at}"
            if attempt == "again":  # a prune after the crash finishes the job, and writes go on
                assert seen == after
                talk(chat(saver), range(6, 7))
                assert len(view(StatekeepSaver(store))) == 4
                assert len(store.list()) == 1  # nothing left behind
            store.close()


def test_writes_beside_a_prune_are_never_lost(tmp_path: Path) -> None:
    """A checkpoint written between the prune's read and its commit makes it start again
    (so it is kept); a saver that still sees the old State finds the thread where it went."""
    other: list[StatekeepSaver] = []

    class Interleaved(SQLiteStore):
        def write(self, state_id: str, entries: Any, snapshot: Any, **kwargs: Any) -> None:
            if other and any(e.get("kind") == "lg.moved" for e in entries):
                talk(chat(other.pop()), range(3, 4))  # another process writes just before the commit
            super().write(state_id, entries, snapshot, **kwargs)

    store = Interleaved(tmp_path / "s.db", namespace="lg")
    saver, stale = StatekeepSaver(store), StatekeepSaver(store)
    talk(chat(saver), range(3))
    assert len(view(stale)) == 9  # ``stale`` has seen the thread where it is now
    other.append(StatekeepSaver(store))
    saver.prune(["t"])
    assert not other  # the interleaved write happened
    newest = view(saver)
    assert len(newest) == 1 and len(newest[0][0]["messages"]) == 8  # its checkpoint is the one kept
    talk(chat(stale), range(4, 5))  # writes to the moved thread, not to the State it knew
    assert len(view(StatekeepSaver(store))[0][0]["messages"]) == 10
    assert len(store.list()) == 1
    store.close()


async def test_aprune_and_adelete_for_runs_do_what_the_sync_ones_do(tmp_path: Path) -> None:
    results = []
    for api in ("sync", "async"):
        store = SQLiteStore(tmp_path / f"{api}.db", namespace="lg")
        saver = StatekeepSaver(store)
        graph = chat(saver)
        for run in ("r1", "r2", "r3"):
            await graph.ainvoke(
                {"messages": [HumanMessage(run, id=run)]}, {"configurable": {"thread_id": "t", "run_id": run}}
            )
        if api == "sync":
            saver.delete_for_runs(["r2"])
            after_runs = view(saver)
            saver.prune(["t"])
        else:
            await saver.adelete_for_runs(["r2"])
            after_runs = view(saver)
            await saver.aprune(["t"])
        results.append((after_runs, view(saver), len(store.list())))
        store.close()
    assert results[0] == results[1]
    assert len(results[0][0]) == 6 and len(results[0][1]) == 1 and results[0][2] == 1


@pytest.mark.parametrize("api", ["sync", "async"])
def test_two_rewrites_of_one_thread_at_once_never_lose_it(tmp_path: Path, api: str) -> None:
    """``delete_for_runs`` (which visits every thread) run by another process while a prune
    of the thread has written its new copy but not yet committed: it waits for the prune
    instead of taking that copy for a leftover and removing it."""
    path = tmp_path / "s.db"
    waiting = threading.Event()
    other: list[threading.Thread] = []

    class Elsewhere(SQLiteStore):  # the other process's store: says when it waits for a lease
        def current_lease(self, state_id: str) -> Any:
            waiting.set()
            return super().current_lease(state_id)

        async def acurrent_lease(self, state_id: str) -> Any:
            waiting.set()
            return await super().acurrent_lease(state_id)

    class Interleaved(SQLiteStore):
        def write(self, state_id: str, entries: Any, snapshot: Any, **kwargs: Any) -> None:
            super().write(state_id, entries, snapshot, **kwargs)
            if not other and snapshot["langgraph"].get("pending"):  # step 2 done, commit to come
                worker = threading.Thread(target=another_process)
                other.append(worker)
                worker.start()
                waiting.wait()  # it runs until it waits for the prune (or, unserialised, ends)

    def another_process() -> None:
        elsewhere = Elsewhere(path, namespace="lg")
        try:
            saver = StatekeepSaver(elsewhere)
            if api == "sync":
                saver.delete_for_runs(["some-run"])
            else:
                asyncio.run(saver.adelete_for_runs(["some-run"]))
        finally:
            elsewhere.close()
            waiting.set()

    store = Interleaved(path, namespace="lg")
    saver = StatekeepSaver(store)
    talk(chat(saver), range(3))
    before = view(saver)
    saver.prune(["t"])
    other[0].join()
    assert view(saver) == before[:1]
    assert len(store.list()) == 1
    store.close()


def test_a_rewrite_with_nothing_to_do_writes_and_deletes_nothing(tmp_path: Path) -> None:
    calls: list[str] = []

    class Counted(SQLiteStore):
        def write(self, *args: Any, **kwargs: Any) -> None:
            calls.append("write")
            super().write(*args, **kwargs)

        def delete(self, *args: Any, **kwargs: Any) -> Any:
            calls.append("delete")
            return super().delete(*args, **kwargs)

        def acquire(self, *args: Any, **kwargs: Any) -> Any:
            calls.append("acquire")
            return super().acquire(*args, **kwargs)

    store = Counted(tmp_path / "s.db", namespace="lg")
    saver = StatekeepSaver(store)
    graph = chat(saver)
    for n in range(20):
        talk(graph, range(1), thread=f"t{n}")
    calls.clear()
    saver.delete_for_runs(["a-run-that-is-nowhere"])  # visits the 20 threads: nothing to drop
    assert calls == []
    saver.prune(["t0"])
    assert calls.count("acquire") == 1 and calls.count("write") == 6  # there and back
    calls.clear()
    saver.prune(["t0"])  # pruned already: nothing to drop
    assert calls == []
    store.close()


def test_a_list_is_stored_as_a_delta_only_when_its_stored_items_are_unchanged(store: Store) -> None:
    """What a list channel reads back is what LangGraph held at each put (compared by repr:
    ``True == 1`` and dicts compare equal in any order): an item edited in place after it was
    stored, or an equal item of another type, or a dict with its keys reordered, makes the
    list stored whole, not as what it appends to a prefix stored with other bytes."""
    edited = {"k": 1}
    steps: list[Any] = [
        lambda: [edited],
        lambda: edited.update(k=2) or [edited, {"k": 3}],  # the stored item edited in place
        lambda: [1, 2],
        lambda: [True, 2, 3],  # equal to [1, 2] + [3]; other types
        lambda: [1.0, 2, 3, 4],
        lambda: [{"a": 1, "b": 2}],
        lambda: [{"b": 2, "a": 1}, 5],
        lambda: [{"b": 2, "a": 1}, 5, 6],  # a true extension: stored as a delta
    ]
    ours, reference = StatekeepSaver(store), InMemorySaver()
    configs: dict[int, Any] = {}
    for version, step in enumerate(steps, 1):
        value = step()
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"items": value}
        checkpoint["channel_versions"] = {"items": version}
        savers: list[Any] = [ours, reference]
        for n, saver in enumerate(savers):
            config = configs.get(n, {"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
            configs[n] = saver.put(config, checkpoint, {"step": version}, {"items": version})

    def shown(saver: Any) -> list[str]:
        return [
            repr(t.checkpoint["channel_values"]) for t in saver.list({"configurable": {"thread_id": "t"}})
        ]

    assert shown(StatekeepSaver(store)) == shown(reference)
    assert shown(ours) == shown(reference)
    record = StatekeepSaver(store).store.read("t")
    assert record is not None
    deltas = [e for e in record.entries if e["kind"] == "lg.checkpoint" and e.get("deltas")]
    assert len(deltas) == 1  # only the last step extends the list stored before it


@pytest.mark.parametrize("then_deleted", [False, True])
def test_when_a_prune_returns_the_old_history_is_gone_even_if_a_writer_came_first(
    tmp_path: Path, then_deleted: bool
) -> None:
    """A writer writes to the moved thread before the prune clears its mark (and, maybe, the
    thread is then deleted): prune still returns with the old State removed."""
    committed: list[bool] = []

    class Interleaved(SQLiteStore):
        def write(self, state_id: str, entries: Any, snapshot: Any, **kwargs: Any) -> None:
            if committed == [True]:  # the write after the commit: the mark's clearing
                committed.append(False)
                elsewhere = StatekeepSaver(SQLiteStore(tmp_path / "s.db", namespace="lg"))
                talk(chat(elsewhere), range(3, 4))
                if then_deleted:
                    elsewhere.delete_thread("t")
                elsewhere.store.close()
            super().write(state_id, entries, snapshot, **kwargs)
            if not committed and any(e.get("kind") == "lg.moved" for e in entries):
                committed.append(True)

    store = Interleaved(tmp_path / "s.db", namespace="lg")
    saver = StatekeepSaver(store)
    talk(chat(saver), range(3))
    saver.prune(["t"])
    assert committed == [True, False]
    assert len(store.list()) == (0 if then_deleted else 1)
    if not then_deleted:
        assert len(view(StatekeepSaver(store))) >= 1
    store.close()
