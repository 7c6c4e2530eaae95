"""Approvals in the viewer over plain HTTP (Starlette's TestClient, a real FileStore): the runs
page's "waiting for approval" filter, a run page's pending calls, and the decision POST that
``allow_approve`` adds. A POST without the CSRF token, from another site, without the viewer's
token or without ``allow_approve`` is refused and changes nothing. In Chromium:
test_viewer_approvals_browser.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from statekeep import FileStore, State, agent_info
from statekeep.web import create_app
from tests.support.webpage import Node, parse

LOCAL = "http://127.0.0.1:8765"
TOKEN = "approve-s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def waiting(state_id: str) -> State:
    """A State stopped for approval of call c1 (pay) and c2 (refund)."""
    state = State("pay the bill", id=state_id)
    state.begin_run(agent_info("payer", "m", tools=["pay", "refund"]))
    state.request("m")
    state.add_reply(
        "", [{"id": "c1", "name": "pay", "args": {"amount": 120}}, {"id": "c2", "name": "refund", "args": {}}]
    )
    state._wait_for_approval(["c1", "c2"])
    return state


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileStore]:
    with FileStore(tmp_path / "store") as s:
        s.save(waiting("bill"))
        done = State("other", id="other")
        done.finish("ok")
        s.save(done)
        yield s


def page(client: TestClient, url: str, **headers: str) -> Node:
    response = client.get(url, headers=headers)
    assert response.status_code == 200, response.text
    return parse(response.text)


def csrf_of(doc: Node) -> str:
    return doc.all("input", name="csrf")[0].attrs["value"]


def test_the_runs_page_filters_runs_waiting_for_approval(store: FileStore) -> None:
    with TestClient(create_app(store), base_url=LOCAL) as client:
        link = page(client, "/").one("a", id="awaiting")
        assert link.attrs["href"] == "/?status=approval"
        doc = page(client, link.attrs["href"])
        assert [tr.attrs["data-id"] for tr in doc.one("table", id="runs").all("tr", cls="run")] == ["bill"]
        assert doc.one("span", id="awaiting").text == "Waiting for approval"


def test_a_run_page_shows_pending_approvals_read_only(store: FileStore) -> None:
    with TestClient(create_app(store), base_url=LOCAL) as client:
        doc = page(client, "/runs/bill")
        items = doc.one("section", id="approvals").all("li", cls="approval")
        assert [li.attrs["data-call"] for li in items] == ["c1", "c2"]
        assert items[0].one("strong", cls="tool").text == "pay" and "120" in items[0].one("pre").text
        assert doc.all("form", cls="decide") == [] and doc.all("button") == []
        assert "statekeep approve bill CALL" in doc.one("section", id="approvals").text
        assert page(client, "/runs/other").maybe("section", id="approvals") is None
        waits = doc.one("li", cls="kind-approval_wait")
        assert [c.text for c in waits.all("span", cls="call-id")] == ["c1", "c2"]
        refused = client.post("/runs/bill/approvals/c1", data={"decision": "approve"})
        assert refused.status_code == 405
    assert store.load("bill").pending_approvals[0]["id"] == "c1"


def test_allow_approve_needs_a_token(store: FileStore) -> None:
    with pytest.raises(ValueError, match=r"--allow-approve .* give it a --token"):
        create_app(store, allow_approve=True)


def test_the_buttons_approve_and_reject_with_the_csrf_token(store: FileStore) -> None:
    app = create_app(store, token=TOKEN, allow_approve=True)
    with TestClient(app, base_url=LOCAL, follow_redirects=False) as client:
        doc = page(client, "/runs/bill", **AUTH)
        forms = doc.all("form", cls="decide")
        assert [f.attrs["action"] for f in forms] == ["/runs/bill/approvals/c1", "/runs/bill/approvals/c2"]
        csrf = csrf_of(doc)
        done = client.post(
            "/runs/bill/approvals/c1",
            data={"csrf": csrf, "decision": "approve", "note": "ok by Ann"},
            headers={**AUTH, "Origin": LOCAL},
        )
        assert done.status_code == 303 and done.headers["location"] == "/runs/bill"
        done = client.post("/runs/bill/approvals/c2", data={"csrf": csrf, "decision": "reject"}, headers=AUTH)
        assert done.status_code == 303
        again = client.post(
            "/runs/bill/approvals/c2", data={"csrf": csrf, "decision": "approve"}, headers=AUTH
        )
        assert again.status_code == 409 and "rejected already" in again.text
        assert page(client, "/runs/bill", **AUTH).maybe("section", id="approvals") is None
    decisions = [
        (e["call_id"], e["approved"], e["note"])
        for e in store.load("bill").history
        if e["kind"] == "approval"
    ]
    assert decisions == [("c1", True, "ok by Ann"), ("c2", False, None)]
    with TestClient(create_app(store), base_url=LOCAL) as client:
        shown = page(client, "/runs/bill").all("li", cls="kind-approval")
        assert [li.one("strong", cls="decision").text for li in shown] == ["approved", "rejected"]
        assert shown[0].one("p", cls="note").text == "ok by Ann"


def test_a_post_without_csrf_token_or_from_elsewhere_or_without_the_token_changes_nothing(
    store: FileStore,
) -> None:
    before = store.read("bill")
    app = create_app(store, token=TOKEN, allow_approve=True)
    with TestClient(app, base_url=LOCAL, follow_redirects=False) as client:
        csrf = csrf_of(page(client, "/runs/bill", **AUTH))
        refused = [
            client.post("/runs/bill/approvals/c1", data={"decision": "approve"}, headers=AUTH),
            client.post(
                "/runs/bill/approvals/c1", data={"csrf": "guess", "decision": "approve"}, headers=AUTH
            ),
            client.post(
                "/runs/bill/approvals/c1",
                data={"csrf": csrf, "decision": "approve"},
                headers={**AUTH, "Origin": "https://evil.example"},
            ),
            client.post(
                "/runs/bill/approvals/c1",
                data={"csrf": csrf, "decision": "approve"},
                headers={**AUTH, "Sec-Fetch-Site": "cross-site"},
            ),
        ]
        assert [r.status_code for r in refused] == [403, 403, 403, 403]
        assert "Nothing was changed" in refused[0].text
        no_token = client.post("/runs/bill/approvals/c1", data={"csrf": csrf, "decision": "approve"})
        assert no_token.status_code == 401
        elsewhere = client.post("/runs/bill", data={"csrf": csrf}, headers=AUTH)
        assert elsewhere.status_code == 405
        unknown = client.post(
            "/runs/bill/approvals/c9", data={"csrf": csrf, "decision": "approve"}, headers=AUTH
        )
        assert unknown.status_code == 409 and "no tool call" in unknown.text
        bad = client.post("/runs/bill/approvals/c1", data={"csrf": csrf, "decision": "maybe"}, headers=AUTH)
        assert bad.status_code == 400
        missing = client.post(
            "/runs/nobody/approvals/c1", data={"csrf": csrf, "decision": "approve"}, headers=AUTH
        )
        assert missing.status_code == 404
    with TestClient(create_app(store, token=TOKEN), base_url=LOCAL) as client:  # no allow_approve
        assert (
            client.post(
                "/runs/bill/approvals/c1", data={"csrf": csrf, "decision": "approve"}, headers=AUTH
            ).status_code
            == 405
        )
    assert store.read("bill") == before


def test_serve_allow_approve_without_a_token_is_refused(store: FileStore) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "statekeep", "serve", "--store", str(store.path), "--allow-approve"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "STATEKEEP_TOKEN"},
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        "statekeep: --allow-approve lets the viewer's users approve tool calls: give it a --token "
        "(or $STATEKEEP_TOKEN) too, so that only they can\n"
    )


def test_a_run_page_shows_steps_and_resumed_calls_in_words(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s") as store:
        state = State("bill", id="billing")
        store.step(state, "invoice", lambda: "INV-1")
        state.begin_run(agent_info("agent", "m", tools=["pay"]))
        state.request("m")
        state.add_reply("", [{"id": "c1", "name": "pay", "args": {}}])
        state._resume_call("c1", "reconcile")
        store.save(state)
        with TestClient(create_app(store), base_url=LOCAL) as client:
            doc = page(client, "/runs/billing")
    end = doc.one("li", cls="kind-step_end")
    assert end.one("code", cls="key").text == "invoice" and end.one("span", cls="outcome").text == "done"
    assert "INV-1" in end.one("pre").text and doc.all("pre", cls="raw") == []
    resumed = doc.one("li", cls="kind-tool_resume")
    assert (
        resumed.one("span", cls="call-id").text == "c1"
        and resumed.one("strong", cls="by").text == "reconcile"
    )


def started(store: FileStore) -> None:
    """``bill`` as a run leaves it while its approved call c1 runs (or after it was cut off
    there): c1 resumed with no result saved, c2 still waiting."""
    state = store.load("bill")
    state.approve("c1")
    state.begin_run(agent_info("payer", "m", tools=["pay", "refund"]))
    state._resume_call("c1", "approved")
    store.save(state)


def test_a_decision_while_another_call_runs_is_refused_and_changes_nothing(store: FileStore) -> None:
    started(store)
    before = store.read("bill")
    app = create_app(store, token=TOKEN, allow_approve=True)
    with TestClient(app, base_url=LOCAL, follow_redirects=False) as client:
        csrf = app.state.csrf  # from a tab opened before the run went on: its page had the buttons
        refused = client.post(
            "/runs/bill/approvals/c2", data={"csrf": csrf, "decision": "approve"}, headers=AUTH
        )
    assert refused.status_code == 409 and "started and have no saved result (c1)" in refused.text
    assert store.read("bill") == before  # no decision, and no "may or may not have run" for c1


def test_a_call_id_with_a_slash_is_decided_from_its_page(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s") as store:
        state = State("pay", id="slashed")
        state.begin_run(agent_info("payer", "m", tools=["pay"]))
        state.request("m")
        state.add_reply("", [{"id": "call/1", "name": "pay", "args": {}}])
        state._wait_for_approval(["call/1"])
        store.save(state)
        app = create_app(store, token=TOKEN, allow_approve=True)
        with TestClient(app, base_url=LOCAL, follow_redirects=False) as client:
            doc = page(client, "/runs/slashed", **AUTH)
            action = doc.one("form", cls="decide").attrs["action"]
            done = client.post(action, data={"csrf": csrf_of(doc), "decision": "approve"}, headers=AUTH)
        assert done.status_code == 303, done.text
        decision = store.load("slashed")._decision("call/1")
        assert decision is not None and decision["approved"] is True
