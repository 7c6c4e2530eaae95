"""The viewer's charts in a real headless Chromium, in light and dark mode, and with scripts
off: a run page's waterfall (a bar per call, each with its tooltip title) and token chart, and
the runs page's counts by status and runs-over-time chart. The server is ``statekeep serve``
in a process of its own over a FileStore (tests.support.browser)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore
from tests.support.browser import Server, wait_for
from tests.web.test_viewer_browser import by_css, make_store, one, shown

#: The page's background and a model bar's fill, as Chromium computes them, per scheme
#: (style.css: --bg and --model, and their dark twins).
COLOURS = {
    "light": {"bg": "rgb(255, 255, 255)", "model": "rgb(106, 75, 181)", "accent": "rgb(35, 88, 166)"},
    "dark": {"bg": "rgb(21, 25, 28)", "model": "rgb(179, 157, 219)", "accent": "rgb(138, 180, 248)"},
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileStore]:
    made = make_store(tmp_path / "store")
    yield made
    made.close()


@contextmanager
def scheme(driver: Any, name: str, *, scripts: bool = True) -> Iterator[None]:
    """Pages opened inside see ``prefers-color-scheme: name`` (and run no script, without
    ``scripts``); the browser is as it was after."""
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": name}]}
    )
    if not scripts:
        driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    try:
        yield
    finally:
        driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def style(driver: Any, element: Any, prop: str) -> str:
    return str(driver.execute_script("return getComputedStyle(arguments[0])[arguments[1]];", element, prop))


def box(driver: Any, element: Any) -> dict[str, float]:
    return dict(
        driver.execute_script(
            "const r = arguments[0].getBoundingClientRect(); return {x: r.x, width: r.width, height: r.height};",
            element,
        )
    )


def title_of(driver: Any, element: Any) -> str:
    """A bar's tooltip: the text of its SVG <title> child (what Chromium shows on hover)."""
    return str(
        driver.execute_script("return arguments[0].querySelector(':scope > title').textContent;", element)
    )


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_a_run_page_draws_a_bar_per_call_with_its_tooltip(
    serve: Any, page: Any, store: FileStore, mode: str
) -> None:
    server: Server = serve(str(store.path))
    with scheme(page, mode):
        page.get(server.url + "runs/alpha-1")
        wait_for(page, shown("svg#run-timeline g.bar"), "the run's waterfall")
        bars = by_css(page, "svg#run-timeline g.bar")
        assert [b.get_attribute("class").split()[:2] for b in bars] == [
            ["bar", "model"],
            ["bar", "tool"],
            ["bar", "model"],
        ]
        titles = [title_of(page, b) for b in bars]
        assert titles[0].startswith("model request to model-r; from +")
        assert titles[0].endswith("done; tokens: 1,000 in · 500 out · 1,500 total")
        assert titles[1].startswith("tool search (call c1); from +") and titles[1].endswith("; done")
        rects = [box(page, one(b, "rect")) for b in bars]
        assert all(r["width"] > 0 and r["height"] > 0 for r in rects)
        assert [r["x"] for r in rects] == sorted(r["x"] for r in rects)  # later calls start further right
        colours = COLOURS[mode]
        assert style(page, one(page, "body"), "backgroundColor") == colours["bg"]
        assert style(page, one(bars[0], "rect"), "fill") == colours["model"]
        assert one(page, "#chart-summary").text.startswith("2 model requests and 1 tool call.")
        usage = by_css(page, "svg#run-tokens g.usage")
        assert (
            len(usage) == 2
            and title_of(page, usage[1]) == "model call 2 (model-r, seq 6): 234 in · 67 out · 301 total"
        )
        widths = [sum(box(page, r)["width"] for r in by_css(u, "rect")) for u in usage]
        assert widths[1] == pytest.approx(widths[0] * 301 / 1500, rel=0.02)


def test_an_open_call_is_marked(serve: Any, page: Any, store: FileStore) -> None:
    server: Server = serve(str(store.path))
    page.get(server.url + "runs/alpha-2")
    wait_for(page, shown("svg#run-timeline g.bar.open"), "the call in doubt")
    bar = one(page, "svg#run-timeline g.bar.open")
    assert bar.get_attribute("data-call") == "b1"
    assert one(bar, "text.duration").text == "in doubt"
    assert "in doubt: it may or may not have run" in title_of(page, bar)
    assert box(page, one(bar, "path.edge"))["width"] > 0  # the bar's edge, with no right side


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_the_runs_page_shows_counts_and_runs_over_time(
    serve: Any, page: Any, store: FileStore, mode: str
) -> None:
    server: Server = serve(str(store.path))
    with scheme(page, mode):
        page.get(server.url)
        wait_for(page, shown("#run-counts li"), "the counts")
        counts = {li.get_attribute("data-status"): li.text for li in by_css(page, "#run-counts li")}
        assert counts == {"running": "2 running", "finished": "1 finished", "limit": "1 stopped by the limit"}
        assert one(page, "#run-stats-title").text == "All 4 runs"
        buckets = by_css(page, "svg#runs-chart g.bucket")
        assert len(buckets) == 24 and sum(int(b.get_attribute("data-count")) for b in buckets) == 4
        assert title_of(page, buckets[-1]).endswith(": 4 runs created")
        tallest = box(page, one(buckets[-1], "rect"))
        assert tallest["height"] > 0 and tallest["width"] > 0
        assert style(page, one(buckets[-1], "rect"), "fill") == COLOURS[mode]["accent"]
        assert style(page, one(page, "body"), "backgroundColor") == COLOURS[mode]["bg"]
        assert "4 in all, at most 4 in one hour" in one(page, "#runs-chart-summary").text


def test_the_charts_need_no_script(serve: Any, page: Any, store: FileStore) -> None:
    server: Server = serve(str(store.path))
    with scheme(page, "light", scripts=False):
        page.get(server.url + "runs/alpha-1")
        wait_for(page, shown("svg#run-timeline g.bar"), "the waterfall")
        assert len(by_css(page, "svg#run-timeline g.bar rect")) == 3
        assert box(page, one(page, "svg#run-timeline"))["width"] > 500
        page.get(server.url)
        wait_for(page, shown("svg#runs-chart g.bucket"), "the runs chart")
        assert len(by_css(page, "#run-counts li")) == 3


def test_user_data_in_the_charts_stays_text(serve: Any, page: Any, store: FileStore) -> None:
    from statekeep import State, agent_info
    from tests.web.test_viewer_browser import IMG, SCRIPT

    name = f"{SCRIPT}\"'{IMG}"
    state = State("evil names", id="evil-names")
    state.begin_run(agent_info("bot", f"model {IMG}", tools=[name]))
    state.request(f"model {IMG}")
    state.add_reply("", [{"id": f"call {SCRIPT}", "name": name, "args": {}}], usage={"input_tokens": 3})
    state.add_tool_result(f"call {SCRIPT}", "ok")
    store.save(state)
    server: Server = serve(str(store.path))
    page.get(server.url + "runs/evil-names")
    wait_for(page, shown("svg#run-timeline g.bar.tool"), "the waterfall")
    bar = one(page, "svg#run-timeline g.bar.tool")
    assert bar.get_attribute("data-call") == f"call {SCRIPT}"
    assert title_of(page, bar).startswith(f"tool {name} (call call {SCRIPT}); from +")
    assert one(bar, "text.label").text == name[:29] + "…"
    assert f"model {IMG}" in title_of(page, one(page, "svg#run-tokens g.usage"))
    assert by_css(page, "svg script, svg img, #charts script, #charts img") == []
    assert page.execute_script("return window.__pwned === undefined;")


def test_odd_token_counts_and_earlier_pages_draw_inside_the_charts(
    serve: Any, page: Any, store: FileStore
) -> None:
    from statekeep import State, agent_info

    state = State("odd usage", id="odd")
    state.begin_run(agent_info("bot", "m1", tools=["slow"]))
    state.request("m1")
    state.add_reply(
        "",
        [{"id": "s1", "name": "slow", "args": {}}],
        usage={"input_tokens": 900, "output_tokens": 300, "total_tokens": 1000},  # in + out > total
    )
    state.add_tool_result("s1", "done")  # seq 4
    state.request("m1")
    state.add_reply("", usage={"input_tokens": -50, "output_tokens": "many"})
    store.save(state)
    server: Server = serve(str(store.path))
    page.get(server.url + "runs/odd")
    wait_for(page, shown("svg#run-tokens g.usage"), "the token chart")
    chart = box(page, one(page, "svg#run-tokens"))
    rects = [box(page, r) for r in by_css(page, "svg#run-tokens rect")]
    assert rects and all(r["width"] >= 0 for r in rects)
    assert all(
        chart["x"] <= r["x"] and r["x"] + r["width"] <= chart["x"] + chart["width"] + 0.5 for r in rects
    )
    # A page of the entries before the call's result: the call is drawn done, not in doubt.
    page.get(server.url + "runs/odd?before=4")
    wait_for(page, shown("svg#run-timeline g.bar.tool"), "the earlier page's waterfall")
    bar = one(page, "svg#run-timeline g.bar.tool")
    assert "state-done" in bar.get_attribute("class").split() and title_of(page, bar).endswith("; done")
    assert by_css(page, "svg#run-timeline g.bar.open") == []
