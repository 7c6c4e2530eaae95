"""State.compact: what the model sees after a compaction, what stays, what is refused, and
that a compacted State saves, loads and rebuilds as it was."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeep import FORMAT_VERSION, CorruptStateError, MemoryStore, State, Store, agent_info
from statekeep._run.history import SUMMARY_INTRO

AGENT = agent_info("helper", "model-x", tools=["look"])


def summary(text: str) -> dict[str, Any]:
    return {"role": "user", "content": SUMMARY_INTRO + text}


def with_tools(state_id: str = "s1") -> State:
    """seq 0 task, 1 run_start, 2 request, 3 reply calling c1 and c2, 4 and 5 their
    results, 6 request, 7 reply."""
    state = State("find the answer", id=state_id)
    state.begin_run(AGENT)
    state.request("model-x")
    state.add_reply(
        "Looking.", [{"id": "c1", "name": "look", "args": {}}, {"id": "c2", "name": "look", "args": {}}]
    )
    state.add_tool_result("c1", "one")
    state.add_tool_result("c2", "two")
    state.request("model-x")
    state.add_reply("It is 42.")
    return state


def test_the_model_sees_the_summary_then_the_messages_after_through() -> None:
    state = with_tools()
    state.set_data("k", [1])
    state.compact("Two looks gave one and two.", through=5)
    assert state.messages == [
        summary("Two looks gave one and two."),
        {"role": "assistant", "content": "It is 42."},
    ]
    last = state.history[-1]
    assert {k: v for k, v in last.items() if k != "at"} == {
        "seq": 9,
        "kind": "compaction",
        "summary": "Two looks gave one and two.",
        "through": 5,
    }
    # Everything else stays as it was.
    assert (state.task, state.turn, dict(state.data), len(state.history)) == (
        "find the answer",
        2,
        {"k": [1]},
        10,
    )
    assert state.compacted_through == 5
    state.add_user("And now?")
    assert state.messages[-1] == {"role": "user", "content": "And now?"} and len(state.messages) == 3


def test_through_defaults_to_every_entry_so_far() -> None:
    state = with_tools()
    state.compact("All of it.")
    assert state.messages == [summary("All of it.")]
    assert state.history[-1]["through"] == 7


def test_a_new_state_has_no_compaction() -> None:
    state = with_tools()
    assert state.compacted_through is None
    assert state.messages[0] == {"role": "user", "content": "find the answer"}


def test_the_latest_compaction_wins_and_replaces_the_earlier_summary() -> None:
    state = with_tools()
    state.compact("first", through=2)
    assert state.messages[0] == summary("first") and len(state.messages) == 5
    state.compact("second", through=5)  # below the first compaction's own seq (8): allowed
    assert state.messages == [summary("second"), {"role": "assistant", "content": "It is 42."}]
    state.compact("third", through=5)  # the same through again: a new summary for it
    assert state.messages[0] == summary("third") and len(state.messages) == 2


@pytest.mark.parametrize(
    ("through", "error", "says"),
    [
        (3, ValueError, "through=3 would separate the tool calls of the model reply at seq 3"),
        (4, ValueError, "use through=2 or through=5"),
        (-1, ValueError, "not the seq of an entry before this compaction (the State has seqs 0 to 7)"),
        (8, ValueError, "through=8 is not the seq of an entry before this compaction"),
        ("5", ValueError, "needs 'through' of type int"),
        (True, ValueError, "'through' must be an int"),
        (5.0, ValueError, "needs 'through' of type int"),
    ],
)
def test_a_bad_through_is_refused_and_adds_nothing(through: Any, error: type[Exception], says: str) -> None:
    state = with_tools()
    before, seen = list(state.history), list(state.messages)
    with pytest.raises(error, match=r"^State.compact\(\): ") as caught:
        state.compact("s", through=through)
    assert says in str(caught.value)
    assert state.history == before and state.messages == seen


def test_through_below_the_latest_compaction_is_refused() -> None:
    state = with_tools()
    state.compact("first", through=5)
    with pytest.raises(
        ValueError, match=r"through=2 is below the latest compaction's through=5: .*use 5 or more"
    ):
        state.compact("second", through=2)
    assert state.messages[0] == summary("first") and len(state.history) == 9


def test_a_split_whose_earlier_side_is_already_compacted_names_only_the_later_seq() -> None:
    state = with_tools()
    state.compact("first", through=2)
    state.compact("same", through=2)
    with pytest.raises(ValueError, match=r"use through=5'?$"):
        state.compact("s", through=4)


@pytest.mark.parametrize(
    ("text", "error"), [("", ValueError), ("  \n", ValueError), (None, TypeError), (3, TypeError)]
)
def test_the_summary_must_be_a_non_empty_str(text: Any, error: type[Exception]) -> None:
    state = with_tools()
    with pytest.raises(error, match="summary"):
        state.compact(text)
    assert len(state.history) == 8


def test_no_compaction_while_the_model_or_a_tool_owes_an_answer() -> None:
    state = State("t")
    state.begin_run(AGENT)
    state.request("model-x")
    with pytest.raises(ValueError, match="a compaction while a model request waits"):
        state.compact("s", through=0)
    state.add_reply("", [{"id": "c1", "name": "look", "args": {}}])
    with pytest.raises(ValueError, match="a compaction while tool calls wait for results: c1"):
        state.compact("s", through=0)
    state.add_tool_result("c1", "ok")
    state.compact("s", through=4)
    assert len(state.history) == 6


def test_the_list_the_model_sees_grows_in_place_between_compactions() -> None:
    """Appending a message does not build the list again (replay stays linear)."""
    state = with_tools()
    seen = state.messages
    state.add_user("more")
    assert state.messages is seen and seen[-1]["content"] == "more"
    state.compact("s")
    after = state.messages
    assert after is not seen and after == [summary("s")]
    state.add_user("again")
    assert state.messages is after and len(after) == 2


def test_a_compacted_state_saves_and_loads_as_it_was(store: Store) -> None:
    state = with_tools()
    state.compact("first", through=2)
    store.save(state)
    state.add_user("next")
    state.compact("second", through=9)
    store.save(state)
    loaded = store.load("s1")
    assert loaded == state and loaded.messages == state.messages == [summary("second")]
    assert loaded.compacted_through == 9
    record = store.read("s1")
    assert record is not None and record.snapshot is not None
    assert record.snapshot["v"] == 3 < FORMAT_VERSION
    loaded.add_user("on")
    store.save(loaded)
    assert store.load("s1").messages == [summary("second"), {"role": "user", "content": "on"}]


def bad_histories() -> list[tuple[str, list[dict[str, Any]], str]]:
    good = with_tools().history
    at = good[0]["at"]

    def compaction(**fields: Any) -> dict[str, Any]:
        return {"seq": 8, "kind": "compaction", "at": at, **fields}

    return [
        ("no summary", [*good, compaction(through=7)], "needs 'summary' of type str"),
        ("empty summary", [*good, compaction(summary="", through=7)], "summary is empty"),
        ("no through", [*good, compaction(summary="s")], "needs 'through' of type int"),
        ("through ahead", [*good, compaction(summary="s", through=8)], "through=8 is not the seq"),
        ("split", [*good, compaction(summary="s", through=4)], "would separate the tool calls"),
        (
            "backwards",
            [*good, compaction(summary="s", through=5), {**compaction(summary="t", through=2), "seq": 9}],
            "below the latest compaction's through=5",
        ),
    ]


@pytest.mark.parametrize(("name", "history", "says"), bad_histories(), ids=[b[0] for b in bad_histories()])
def test_a_stored_history_with_a_bad_compaction_is_damaged(
    name: str, history: list[dict[str, Any]], says: str
) -> None:
    store = MemoryStore()
    snapshot = with_tools().snapshot() | {"seq": len(history) - 1}
    store.write("bad", history, snapshot, create=True)
    with pytest.raises(CorruptStateError, match="its history cannot be replayed") as caught:
        store.load("bad")
    assert says in str(caught.value)
    store.close()


# -- the incremental messages against a plain rebuild, on random runs ------------------------


def rebuilt(state: State) -> list[dict[str, Any]]:
    """What the model sees, rebuilt from the whole history the simple way (the spec)."""
    said: list[tuple[int, dict[str, Any]]] = []
    latest: dict[str, Any] | None = None
    for e in state.history:
        kind, seq = e["kind"], e["seq"]
        if kind in ("task", "user"):
            said.append((seq, {"role": "user", "content": e["text"]}))
        elif kind == "model_reply":
            message: dict[str, Any] = {"role": "assistant", "content": e["text"]}
            if e["tool_calls"]:
                message["tool_calls"] = e["tool_calls"]
            said.append((seq, message))
        elif kind == "tool_result":
            said.append(
                (
                    seq,
                    {
                        "role": "tool",
                        "tool_call_id": e["call_id"],
                        "name": e["name"],
                        "content": e["output"],
                        "is_error": e["is_error"],
                    },
                )
            )
        elif kind == "compaction":
            latest = e
    if latest is None:
        return [m for _, m in said]
    return [summary(latest["summary"])] + [m for seq, m in said if seq > latest["through"]]


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.integers(0, 0)),
        st.tuples(st.just("reply"), st.integers(0, 3)),  # with that many tool calls
        st.tuples(st.just("compact"), st.integers(0, 60)),  # through: a try, refused if it is no good
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(STEPS)
def test_messages_equal_a_plain_rebuild_live_and_after_a_load(steps: list[tuple[str, int]]) -> None:
    state = State("task", id="r")
    state.begin_run(AGENT)
    calls = 0
    for step, n in steps:
        if step == "user":
            state.add_user(f"u{len(state.history)}")
        elif step == "reply":
            state.request("model-x")
            ids = [f"c{calls + i}" for i in range(n)]
            calls += n
            state.add_reply("r", [{"id": i, "name": "look", "args": {}} for i in ids])
            for i in ids:
                state.add_tool_result(i, f"out {i}")
        else:
            try:
                state.compact(f"sum {len(state.history)}", through=n)
            except ValueError as exc:
                assert "through=" in str(exc)
        assert state.messages == rebuilt(state)
    store = MemoryStore()
    store.save(state)
    assert store.load("r").messages == rebuilt(state)
    store.close()


def test_a_state_is_stamped_with_the_lowest_format_version_that_reads_it() -> None:
    # A statekeep that knows only format 2 keeps loading every State without a compaction or a
    # base; it refuses one with (resume.py's rule), as it would misread what the model sees.
    store = MemoryStore()
    plain, compacted = State("plain", id="plain"), State("long", id="long")
    compacted.compact("the story so far", through=0)
    store.save(plain)
    store.save(compacted)
    assert plain.snapshot()["v"] == 2 and store.load("plain").snapshot()["v"] == 2
    assert compacted.snapshot()["v"] == 3 < FORMAT_VERSION
