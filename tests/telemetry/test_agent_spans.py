"""The agent loop's spans, after the GenAI semantic conventions: ``invoke_agent {name}`` for a
run, ``chat {model}`` per model request, ``execute_tool {name}`` per tool call, no message
content; a resumed run links to its earlier run's span, which its ``run_start`` entry keeps."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from statekeep import Agent, FileStore, MemoryStore, Reply, ScriptedModel, State, agent_info, tool
from tests.support import otel

SECRET = "the-secret-question"


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny and secret-output"


@tool
def broken(city: str) -> str:
    """Always fails."""
    raise LookupError(f"no {city} (secret-error)")


def calls(*names: str) -> Reply:
    return Reply(
        tool_calls=[
            {"id": f"call-{i}", "name": n, "args": {"city": "secret-arg"}} for i, n in enumerate(names)
        ],
        usage={"input_tokens": 120, "output_tokens": 7},
        stop_reason="tool_calls",
    )


def test_a_run_its_model_requests_and_tool_calls(recorded: otel.Recorded) -> None:
    store = MemoryStore()
    model = ScriptedModel(
        [calls("lookup", "broken"), Reply("done", usage={"prompt_tokens": 200, "completion_tokens": 3})],
        name="gpt-x",
    )
    state = State(SECRET)
    assert Agent(model, tools=[lookup, broken], store=store, name="weather").run(state) == "done"
    store.close()
    spans = [s for s in recorded.spans() if not s.name.startswith("statekeep.")]
    assert [s.name for s in spans] == [
        "chat gpt-x", "execute_tool lookup", "execute_tool broken", "chat gpt-x", "invoke_agent weather"
    ]  # fmt: skip
    run = spans[-1]
    assert run.kind is SpanKind.INTERNAL and run.parent is None and run.links == ()
    assert dict(run.attributes) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "weather",
        "gen_ai.request.model": "gpt-x",
    }
    for span in spans[:-1]:
        assert span.parent is not None and span.parent.span_id == run.context.span_id
    first, second = spans[0], spans[3]
    assert first.kind is SpanKind.CLIENT
    assert dict(first.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-x",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    assert second.attributes["gen_ai.usage.input_tokens"] == 200  # OpenAI's names for them
    assert second.attributes["gen_ai.usage.output_tokens"] == 3
    ok, failed = spans[1], spans[2]
    assert dict(ok.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "call-0",
        "gen_ai.tool.type": "function",
    }
    assert ok.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR and failed.attributes["error.type"] == "LookupError"
    # The saves of the run are store spans inside it.
    saves = recorded.spans("statekeep.save")
    assert saves and all(s.parent is not None and s.parent.span_id == run.context.span_id for s in saves)
    assert otel.content_in(recorded, SECRET, "secret", state.id) == []


def test_the_state_id_only_with_trace_ids(recorded: otel.Recorded) -> None:
    store = MemoryStore(trace_ids=True)
    state = State(SECRET)
    Agent(ScriptedModel(["hi"]), store=store).run(state)
    store.close()
    run = recorded.spans("invoke_agent")[0]
    assert run.attributes["gen_ai.conversation.id"] == state.id


def test_a_resumed_run_links_to_the_earlier_one(tmp_path: Path, recorded: otel.Recorded) -> None:
    """Stopped by its limit, then loaded from another store object and run again (as another
    process would): the second run's span links to the first's, kept in its run_start."""
    model = ScriptedModel([calls("lookup"), "done"])
    with FileStore(tmp_path / "runs") as store:
        state = State(SECRET)
        assert Agent(model, tools=[lookup], store=store, limit=1).run(state) is None
    first = recorded.spans("invoke_agent")[0]
    with FileStore(tmp_path / "runs") as again:
        loaded = again.load(state.id)
        starts = [e for e in loaded.history if e["kind"] == "run_start"]
        assert starts[0]["trace"] == {
            "trace_id": f"{first.context.trace_id:032x}",
            "span_id": f"{first.context.span_id:016x}",
        }
        assert Agent(model, tools=[lookup], store=again, limit=1).run(loaded) == "done"
    second = recorded.spans("invoke_agent")[1]
    assert second.context.trace_id != first.context.trace_id  # a trace of its own, linked
    assert [(link.context.trace_id, link.context.span_id) for link in second.links] == [
        (first.context.trace_id, first.context.span_id)
    ]
    assert dict(second.links[0].attributes) == {"statekeep.link": "resumed"}


def test_a_run_start_with_a_bad_trace_links_nothing(recorded: otel.Recorded) -> None:
    """A history whose run_start holds a malformed trace (a hand edit, another tool) loads and
    runs: the trace is passed over. ``begin_run`` refuses a malformed one, saying why."""
    store = MemoryStore()
    state = State(SECRET)
    store.save(state)
    info = agent_info("agent", "scripted")
    at = "2026-01-01T00:00:00+00:00"
    bad = {"trace_id": "zz", "span_id": "0" * 16}
    store.write(state.id, [{"seq": 1, "kind": "run_start", "at": at, "agent": info, "trace": bad}], None)
    store.write(state.id, [{"seq": 2, "kind": "stop", "at": at, "by": "limit"}], None)
    Agent(ScriptedModel(["ok"]), store=store).run(store.load(state.id))
    store.close()
    assert recorded.spans("invoke_agent")[0].links == ()
    with pytest.raises(ValueError, match="trace trace_id must be 32 lowercase hex digits"):
        State("x").begin_run(agent_info("a", "m"), trace={"trace_id": "1", "span_id": "2"})


def test_the_last_release_reads_a_history_with_traces(tmp_path: Path, recorded: otel.Recorded) -> None:
    """The ``trace`` of run_start is an optional key: a statekeep from before it loads and runs
    such a State (unknown keys are kept and ignored), so no format version is bumped."""
    from tests.support.older import run_older

    store = MemoryStore()
    state = State(SECRET)
    Agent(ScriptedModel([]), store=store, limit=0).run(state)  # stops at once ("limit"), to go on
    record = store.read(state.id)
    store.close()
    assert record is not None and "trace" in record.entries[1]
    # The stores' own formats changed since that release: the history goes through its MemoryStore.
    done = run_older(
        f"""
        import json
        from statekeep import Agent, MemoryStore, ScriptedModel
        store = MemoryStore()
        store.write("run", json.loads({json.dumps(record.entries)!r}), json.loads({json.dumps(record.snapshot)!r}), create=True)
        state = store.load("run")
        print(Agent(ScriptedModel(["done"]), store=store, limit=1).run(state))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"


def test_no_agent_spans_for_a_store_without_telemetry(recorded: otel.Recorded) -> None:
    store = MemoryStore(telemetry=False)
    Agent(ScriptedModel([calls("lookup"), "done"]), tools=[lookup], store=store).run(State(SECRET))
    store.close()
    assert recorded.spans() == []


def test_statekeep_runs_without_opentelemetry(tmp_path: Path) -> None:
    """With OpenTelemetry not installed (its import refused), stores and agents run as ever,
    and statekeep never tries to import it."""
    script = textwrap.dedent(
        """
        import sys

        class NoOpenTelemetry:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ImportError("opentelemetry is not installed")
                return None

        sys.meta_path.insert(0, NoOpenTelemetry())
        from statekeep import Agent, FileStore, ScriptedModel, State

        with FileStore("runs") as store:
            state = State("t")
            Agent(ScriptedModel(["fine"]), store=store).run(state)
            assert store.load(state.id).answer == "fine"
            store.list()
        assert not any(name.startswith("opentelemetry") for name in sys.modules)
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_run_resumed_in_another_process_links_to_this_ones(tmp_path: Path, recorded: otel.Recorded) -> None:
    """The link survives the process: the run stopped here is resumed by a new process with
    its own tracer provider, whose run span links to this process's."""
    with FileStore(tmp_path / "runs") as store:
        state = State(SECRET)
        Agent(ScriptedModel([calls("lookup")]), tools=[lookup], store=store, limit=1).run(state)
    first = recorded.spans("invoke_agent")[0]
    script = textwrap.dedent(
        f"""
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from statekeep import Agent, FileStore, ScriptedModel, tool

        spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        trace.set_tracer_provider(provider)

        @tool
        def lookup(city: str) -> str:
            \"\"\"Look a city up.\"\"\"
            return city

        with FileStore({str(tmp_path / "runs")!r}) as store:
            state = store.load({state.id!r})
            Agent(ScriptedModel(["done"]), tools=[lookup], store=store).run(state)
        run = next(s for s in spans.get_finished_spans() if s.name == "invoke_agent agent")
        for link in run.links:
            print(f"{{link.context.trace_id:032x}} {{link.context.span_id:016x}}")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"{first.context.trace_id:032x}", f"{first.context.span_id:016x}"]


def test_a_reply_without_usage_runs_as_it_does_untraced(recorded: otel.Recorded) -> None:
    """A model function may give ``usage: None`` (State.add_reply takes it): traced, the run
    is the same, its chat span simply has no token counts."""

    def model(messages: list[dict], tools: list[dict]) -> dict:
        return {"text": "hi", "usage": None}

    state = State("no usage")
    with MemoryStore() as store:
        assert Agent(model, store=store).run(state) == "hi"
    assert not [e for e in state.history if e["kind"] == "model_error"]
    (chat,) = recorded.spans("chat")
    assert chat.status.status_code is not StatusCode.ERROR
    assert "gen_ai.usage.input_tokens" not in chat.attributes


def test_a_run_not_sampled_keeps_no_trace_to_link_to(tmp_path: Path) -> None:
    """A run whose span the sampler dropped keeps no ``trace`` in its run_start: the next run
    would link to a span no backend has."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    trace.set_tracer_provider(TracerProvider(sampler=ALWAYS_OFF))
    state = State("unsampled")
    with MemoryStore() as store:
        assert Agent(ScriptedModel(["done"]), store=store).run(state) == "done"
    (start,) = [e for e in state.history if e["kind"] == "run_start"]
    assert "trace" not in start
