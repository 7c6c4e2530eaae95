"""The viewer (``statekeep serve``) in a real headless Chromium: a FileStore written with the
public API, the server in a process of its own, and other processes saving while pages are open."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore, State, agent_info
from tests.support.browser import Server, wait_for

RESEARCHER = agent_info("researcher", "model-r", system="You research.", tools=["search"])
PLANNER = agent_info("planner", "model-p", tools=["book"])
SEARCH_ARGS = {"query": "Q3 revenue", "limit": 5, "filters": {"year": 2026}}
SCRIPT = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=1">'


def by_css(driver: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, css))


def one(driver: Any, css: str) -> Any:
    found = by_css(driver, css)
    assert len(found) == 1, f"{len(found)} elements match {css!r} at {driver.current_url}"
    return found[0]


def shown(css: str) -> Callable[[Any], Any]:
    """A wait condition: the elements matching ``css``, once there is one."""
    return lambda driver: by_css(driver, css)


def make_store(path: Path) -> FileStore:
    """Four runs: finished with a tool call (alpha-1), its subagent stopped by the limit
    (beta-1), a running one whose tool call has an unknown outcome (alpha-2), and a fork."""
    store = FileStore(path)
    alpha = State("Summarise the Q3 report", id="alpha-1", labels={"team": "search"})
    alpha.begin_run(RESEARCHER)
    alpha.add_user("Focus on revenue.")
    alpha.request("model-r")
    call = {"id": "c1", "name": "search", "args": SEARCH_ARGS}
    alpha.add_reply("Let me search.", [call], usage={"input_tokens": 1000, "output_tokens": 500})
    alpha.add_tool_result("c1", {"hits": ["q3.pdf"]})
    alpha.request("model-r")
    alpha.add_reply("Revenue grew 12%.", usage={"input_tokens": 234, "output_tokens": 67})
    alpha.set_data("summary", "grew 12%")
    alpha.finish("Revenue grew 12%.")
    store.save(alpha)
    child = alpha.child("Read q3.pdf", id="beta-1", call_id="c1")
    child.begin_run(RESEARCHER)
    child.request("model-r")
    child.add_model_error("overloaded")
    child.stop("limit")
    store.save(child)
    running = State("Book a flight to Lisbon", id="alpha-2", labels={"team": "travel"})
    running.begin_run(PLANNER)
    running.request("model-p")
    running.add_reply("", [{"id": "b1", "name": "book", "args": {"to": "LIS"}}])
    running.add_tool_result("b1", None, outcome="unknown")
    store.save(running)
    store.fork("alpha-1", at_seq=5, new_id="alpha-1-retry")
    return store


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return make_store(tmp_path / "store")


def in_another_process(store: FileStore, code: str) -> None:
    """Run ``code`` in a new Python process with ``store`` (a FileStore on the same folder),
    ``State`` and ``agent_info`` in scope; it has saved what it saves when this returns."""
    preamble = f"from statekeep import FileStore, State, agent_info\nstore = FileStore({str(store.path)!r})\n"
    proc = subprocess.run(
        [sys.executable, "-c", preamble + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


def row_ids(driver: Any) -> list[str]:
    return [row.get_attribute("data-id") for row in by_css(driver, "#runs tbody tr.run")]


def left_the_document(element: Any) -> Callable[[Any], bool]:
    """A wait condition: ``element`` is no longer in the page. Mid-navigation Chromium may say
    so with "Node with given id does not belong to the document" rather than the stale-element
    error selenium's ``staleness_of`` expects, which then failed the wait."""
    from selenium.common.exceptions import WebDriverException

    def gone(driver: Any) -> bool:
        try:
            element.is_enabled()
        except WebDriverException:  # StaleElementReferenceException is one
            return True
        return False

    return gone


def submit_filter(driver: Any, **fields: str) -> None:
    """Type ``fields`` into the filter form, submit it, and wait for the new page."""

    from selenium.webdriver.support.ui import Select

    form = one(driver, "form#filters")
    for name, value in fields.items():
        box = one(driver, f"form#filters [name={name}]")
        if box.tag_name == "select":  # the status: a choice, by its value ("" is any)
            Select(box).select_by_value(value)
            continue
        box.clear()
        box.send_keys(value)
    one(driver, "#apply").click()
    wait_for(driver, left_the_document(form), "the filtered page")
    wait_for(driver, shown("form#filters"), "the filter form")


def test_the_runs_page_shows_each_run_newest_first(serve: Any, page: Any, store: FileStore) -> None:
    server: Server = serve(str(store.path))
    page.get(server.url)
    wait_for(page, shown("#runs tbody tr.run"), "the runs")
    assert row_ids(page) == [row.id for row in store.list()]  # the store's order: newest first
    row = one(page, 'tr.run[data-id="alpha-1"]')
    link = one(row, "td.task a")
    assert link.text == "Summarise the Q3 report"
    assert link.get_attribute("href") == server.url + "runs/alpha-1"
    assert one(row, "td.agent").text == "researcher"
    assert one(row, "td.status").text == "finished"
    assert "status-finished" in one(row, "td.status").get_attribute("class").split()
    assert one(row, "td.children").text == "1"  # beta-1
    assert one(row, "td.turn").text == str(store.load("alpha-1").turn)
    assert one(row, "td.updated time").get_attribute("datetime")
    assert one(page, 'tr.run[data-id="alpha-2"] td.status').text == "running"
    assert one(page, 'tr.run[data-id="beta-1"] td.status').text == "limit"
    assert one(page, 'tr.run[data-id="alpha-2"] td.children').text == "0"


def test_filters_show_only_the_matching_runs(serve: Any, page: Any, store: FileStore) -> None:
    server: Server = serve(str(store.path))
    page.get(server.url)
    wait_for(page, shown("#runs tbody tr.run"), "the runs")
    submit_filter(page, agent="planner")
    assert row_ids(page) == ["alpha-2"]
    submit_filter(page, agent="", status="finished")
    assert row_ids(page) == ["alpha-1"]
    submit_filter(page, status="", prefix="alpha-1")
    assert sorted(row_ids(page)) == ["alpha-1", "alpha-1-retry"]
    submit_filter(page, prefix="", label="team=travel")
    assert row_ids(page) == ["alpha-2"]
    submit_filter(page, label="", agent="nobody")
    assert row_ids(page) == []
    assert one(page, "#empty").is_displayed()


def test_the_status_filter_is_a_choice_of_the_statuses_seen(serve: Any, page: Any, store: FileStore) -> None:
    server: Server = serve(str(store.path))
    page.get(server.url)
    wait_for(page, shown("#runs tbody tr.run"), "the runs")
    from selenium.webdriver.support.ui import Select

    status = Select(one(page, "form#filters select[name=status]"))
    assert [o.get_attribute("value") for o in status.options] == ["", "running", "finished", "limit"]
    assert [o.text for o in status.options] == ["any", "running", "finished", "limit"]
    assert status.first_selected_option.text == "any"
    submit_filter(page, status="limit")
    assert row_ids(page) == ["beta-1"]
    assert Select(one(page, "select[name=status]")).first_selected_option.text == "limit"
    submit_filter(page, status="")
    assert len(row_ids(page)) == 4


def test_times_read_ago_with_the_exact_time_on_hover(serve: Any, page: Any, store: FileStore) -> None:
    server: Server = serve(str(store.path))
    page.get(server.url)
    wait_for(page, shown("#runs tbody tr.run"), "the runs")
    row = store.list(id_prefix="alpha-2")[0]
    when = one(page, 'tr.run[data-id="alpha-2"] td.updated time')
    assert when.text == "just now" or when.text.endswith(" ago"), when.text
    assert when.get_attribute("title") == row.updated_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    page.get(server.url + "runs/alpha-2")
    wait_for(page, shown("#timeline li.entry"), "the timeline")
    created = one(page, "#created time")
    assert created.text == "just now" or created.text.endswith(" ago"), created.text
    assert created.get_attribute("title").endswith(" UTC")
    snapshot = store.load("alpha-2")
    assert created.get_attribute("datetime") == snapshot.created_at


def entry_style(driver: Any, css: str) -> list[str]:
    """What makes an entry look as it does: its colours and borders, as the browser computed them."""
    script = (
        "const s = getComputedStyle(arguments[0]);"
        "return [s.backgroundColor, s.borderLeftColor, s.borderLeftWidth, s.color, s.outlineStyle];"
    )
    return list(driver.execute_script(script, one(driver, css)))


def test_a_run_page_shows_its_timeline(serve: Any, page: Any, store: FileStore) -> None:
    server: Server = serve(str(store.path))
    page.get(server.url)
    wait_for(page, shown("#runs tbody tr.run"), "the runs")
    one(page, 'tr.run[data-id="alpha-1"] td.task a').click()
    wait_for(page, shown("#timeline li.entry"), "the timeline")
    assert page.current_url == server.url + "runs/alpha-1"
    assert one(page, "#task").text == "Summarise the Q3 report"
    assert one(page, "#status").text == "finished"
    assert one(page, "#agent").text == "researcher"
    assert one(page, "#tokens").text == "1,234 in · 567 out · 1,801 total"
    record = store.read("alpha-1")
    assert record is not None
    items = by_css(page, "#timeline li.entry")
    assert [li.get_attribute("data-seq") for li in items] == [str(e["seq"]) for e in record.entries]
    for li, entry in zip(items, record.entries, strict=True):
        assert f"kind-{entry['kind']}" in li.get_attribute("class").split()
        assert one(li, ".seq").text.strip().lstrip("#") == str(entry["seq"])
        assert one(li, "time.at").get_attribute("datetime")
        gap = one(li, ".gap").text
        assert gap == "" if entry["seq"] == 0 else gap.startswith("+"), (entry["seq"], gap)
    call = one(page, "li.entry.kind-model_reply .tool-call")
    assert "search" in call.text
    assert json.loads(one(call, "pre.args").text) == SEARCH_ARGS
    assert json.loads(one(page, "li.kind-tool_result pre.output").text) == {"hits": ["q3.pdf"]}
    assert "Focus on revenue." in one(page, "li.kind-user").text
    assert "grew 12%" in one(page, "li.kind-data").text
    assert "Revenue grew 12%." in one(page, "li.kind-stop").text
    done_style = entry_style(page, "li.kind-tool_result")

    # The child, its parent, and an unknown outcome that stands out from a done one.
    child = one(page, "#children a")
    assert child.get_attribute("href") == server.url + "runs/beta-1"
    child.click()
    wait_for(page, lambda d: d.current_url == server.url + "runs/beta-1", "the child's page")
    assert one(page, "#parent").get_attribute("href") == server.url + "runs/alpha-1"
    assert "error" in one(page, "li.entry.kind-model_error").get_attribute("class").split()
    page.get(server.url + "runs/alpha-2")
    unknown = one(page, "li.entry.kind-tool_result")
    assert "unknown" in unknown.get_attribute("class").split()
    assert entry_style(page, "li.kind-tool_result") != done_style
    page.get(server.url + "runs/alpha-1-retry")
    assert one(page, "#fork-source").get_attribute("href") == server.url + "runs/alpha-1"


def test_a_running_page_grows_while_another_process_saves(serve: Any, page: Any, store: FileStore) -> None:
    live = State("Plan a trip", id="live-1")
    live.begin_run(PLANNER)
    store.save(live)
    server: Server = serve(str(store.path))
    page.get(server.url + "runs/live-1")
    wait_for(page, shown('body[data-live="on"]'), "the live connection")
    assert [li.get_attribute("data-seq") for li in by_css(page, "#timeline li.entry")] == ["0", "1"]
    page.execute_script("window.__notReloaded = true;")
    in_another_process(
        store,
        """
        state = store.load("live-1")
        state.request("model-p")
        state.add_reply("Booking.", [{"id": "b1", "name": "book", "args": {"to": "LIS"}}],
                        usage={"input_tokens": 10, "output_tokens": 5})
        state.add_tool_result("b1", "booked")
        store.save(state)
        """,
    )
    wait_for(page, shown('#timeline li.entry[data-seq="4"]'), "the saved entries")
    seqs = [li.get_attribute("data-seq") for li in by_css(page, "#timeline li.entry")]
    assert seqs == ["0", "1", "2", "3", "4"]
    reply = one(page, 'li.entry[data-seq="3"]')
    assert "kind-model_reply" in reply.get_attribute("class").split()
    assert json.loads(one(reply, "pre.args").text) == {"to": "LIS"}
    wait_for(page, lambda d: one(d, "#tokens").text == "10 in · 5 out · 15 total", "the new token sum")
    in_another_process(
        store,
        """
        state = store.load("live-1")
        state.finish("Booked.")
        store.save(state)
        """,
    )
    wait_for(page, lambda d: one(d, "#status").text == "finished", "the finished status")
    assert [li.get_attribute("data-seq") for li in by_css(page, "#timeline li.entry")][-1] == "5"
    assert page.execute_script("return window.__notReloaded === true;"), "the page was reloaded"


def test_the_runs_page_shows_runs_other_processes_create(serve: Any, page: Any, store: FileStore) -> None:
    server: Server = serve(str(store.path))
    page.get(server.url)
    wait_for(page, shown("#runs tbody tr.run"), "the runs")
    page.execute_script("window.__notReloaded = true;")
    in_another_process(store, 'store.save(State("A new run", id="gamma-1"))')
    wait_for(page, shown('#runs tbody tr.run[data-id="gamma-1"]'), "the new run")
    assert row_ids(page)[0] == "gamma-1"
    assert one(page, 'tr.run[data-id="gamma-1"] td.task a').text == "A new run"
    # A run another process finishes changes in place, and moves to the top.
    in_another_process(store, 'state = store.load("alpha-2"); state.finish("Booked."); store.save(state)')
    finished = 'tr.run[data-id="alpha-2"] td.status.status-finished'
    wait_for(page, shown(finished), "the finished run")
    assert row_ids(page)[0] == "alpha-2" and row_ids(page).count("alpha-2") == 1
    assert page.execute_script("return window.__notReloaded === true;"), "the page was reloaded"


def assert_not_run(driver: Any, inside: str) -> None:
    """Nothing from the payloads became markup, and nothing ran. (The CSP would block the
    scripts even unescaped, so the markup check is the one that catches missing escaping.)"""
    assert by_css(driver, f"{inside} script") == []
    assert by_css(driver, f"{inside} img") == []
    assert driver.execute_script("return typeof window.__pwned;") == "undefined"


def test_injected_markup_shows_as_text_and_never_runs(serve: Any, page: Any, store: FileStore) -> None:
    task = f"{SCRIPT} {IMG}"
    state = State(task, id="xss")
    state.begin_run(PLANNER)
    state.request("model-p")
    state.add_reply(SCRIPT, [{"id": "x1", "name": "book", "args": {"to": IMG}}])
    state.add_tool_result("x1", SCRIPT)
    state.set_data("note", IMG)
    store.save(state)
    server: Server = serve(str(store.path))
    page.get(server.url)
    wait_for(page, shown('tr.run[data-id="xss"]'), "the run")
    assert one(page, 'tr.run[data-id="xss"] td.task a').text == task
    assert_not_run(page, "#runs")
    page.get(server.url + "runs/xss")
    wait_for(page, shown('body[data-live="on"]'), "the live connection")
    assert one(page, "#task").text == task
    assert one(page, "li.kind-tool_result pre.output").text == SCRIPT
    assert IMG in one(page, "li.kind-data").text
    assert json.loads(one(page, "li.kind-model_reply pre.args").text) == {"to": IMG}
    assert SCRIPT in one(page, "li.kind-model_reply").text
    assert_not_run(page, "#timeline")
    # Entries the script adds live are text too.
    in_another_process(store, f'state = store.load("xss"); state.add_error({IMG!r}); store.save(state)')
    wait_for(page, shown('li.entry[data-seq="6"]'), "the live entry")
    assert IMG in one(page, 'li.entry[data-seq="6"]').text
    assert_not_run(page, "#timeline")


def test_a_token_in_the_url_once_lets_the_browser_in(serve: Any, page: Any, store: FileStore) -> None:
    server: Server = serve(str(store.path), "--token", "s3cret-token")
    page.get(server.url)
    assert by_css(page, "#runs") == []
    assert "token" in one(page, "body").text.lower()
    page.get(server.url + "?token=s3cret-token")
    wait_for(page, shown("#runs tbody tr.run"), "the runs")
    assert page.current_url == server.url  # the token is gone from the address
    port = server.url.rstrip("/").rsplit(":", 1)[1]
    cookie = page.get_cookie(f"statekeep_token_{port}")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert "s3cret" not in page.execute_script("return document.cookie;")
    page.get(server.url + "runs/alpha-1")  # no token in the URL: the cookie does
    wait_for(page, shown("#timeline li.entry"), "the timeline")
    page.delete_all_cookies()
    page.get(server.url + "runs/alpha-1")
    assert by_css(page, "#timeline") == []


def test_a_filtered_runs_page_drops_a_run_that_stops_matching(
    serve: Any, page: Any, store: FileStore
) -> None:
    server: Server = serve(str(store.path))
    page.get(server.url + "?status=running")
    wait_for(page, shown('body[data-live="on"]'), "the live connection")
    assert sorted(row_ids(page)) == ["alpha-1-retry", "alpha-2"]
    page.execute_script("window.__notReloaded = true;")
    in_another_process(store, 'state = store.load("alpha-2"); state.finish("Booked."); store.save(state)')
    wait_for(page, lambda d: row_ids(d) == ["alpha-1-retry"], "the finished run gone from the running ones")
    assert page.execute_script("return window.__notReloaded === true;"), "the page was reloaded"


def test_an_open_run_page_says_when_its_state_is_deleted(serve: Any, page: Any, store: FileStore) -> None:
    server: Server = serve(str(store.path))
    page.get(server.url + "runs/alpha-2")
    wait_for(page, shown('body[data-live="on"]'), "the live connection")
    in_another_process(store, 'store.delete("alpha-2")')
    wait_for(page, lambda d: one(d, "#status").text == "deleted", "the deleted status")
    assert "status-deleted" in one(page, "#status").get_attribute("class").split()
