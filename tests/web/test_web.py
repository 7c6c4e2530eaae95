"""The viewer's pages (statekeep.web.create_app) through Starlette's TestClient over a real
FileStore: the runs page and its filters, a run's timeline, errors, escaping, the headers
and the token. The live streams and ``statekeep serve`` are in test_web_serve.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from statekeep import FileStore, MemoryStore
from statekeep.web import create_app
from tests.support.web_runs import EVIL, every_kind, evil, finished, running, save_all
from tests.support.webpage import Node, parse

LOCAL = "http://127.0.0.1:8765"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileStore]:
    with FileStore(tmp_path / "store") as s:
        yield s


@pytest.fixture
def client(store: FileStore) -> Iterator[TestClient]:
    with TestClient(create_app(store), base_url=LOCAL) as c:
        yield c


def page(client: TestClient, url: str) -> Node:
    response = client.get(url)
    assert response.status_code == 200, response.text
    return parse(response.text)


def row_ids(doc: Node) -> list[str]:
    return [tr.attrs["data-id"] for tr in doc.one("table", id="runs").all("tr", cls="run")]


# -- the runs page ---------------------------------------------------------------------


def test_runs_page_shows_each_run_newest_first(store: FileStore, client: TestClient) -> None:
    old = running("old one", id="r0")  # listed by the time of each one's last entry
    parent = finished("write the report", id="p1", agent="writer")
    child = parent.child("find sources", id="c1")
    save_all(store, old, parent, child, parent.child("check facts", id="c2"))
    doc = page(client, "/")
    assert row_ids(doc) == ["c2", "c1", "p1", "r0"]
    row = doc.one("tr", data_id="p1")
    link = row.one("td", cls="task").one("a")
    assert (link.attrs["href"], link.text) == ("/runs/p1", "write the report")
    assert row.one("td", cls="agent").text == "writer"
    assert row.one("td", cls="turn").text == "1"
    status = row.one("td", cls="status")
    assert status.text == "finished" and "status-finished" in status.classes
    when = row.one("td", cls="updated").one("time")
    assert when.attrs["datetime"].startswith(parent.history[-1]["at"][:19])
    assert when.text == "just now"
    assert row.one("td", cls="children").text == "2"
    assert doc.one("tr", data_id="c1").one("td", cls="children").text == "0"
    assert doc.one("tr", data_id="r0").one("td", cls="status").text == "running"
    assert doc.maybe(id="empty") is None and doc.maybe(id="next") is None
    form = doc.one("form", id="filters")
    assert (form.attrs["method"], form.attrs["action"]) == ("get", "/")
    assert {i.attrs["name"] for i in form.all("input")} == {"agent", "label", "prefix"}
    assert form.one("select").attrs["name"] == "status"
    assert form.one("button", id="apply").attrs["type"] == "submit"


def test_runs_page_filters(store: FileStore, client: TestClient) -> None:
    limited = running("hit the limit", id="lim", agent="bot")
    limited.add_reply("")
    limited.stop("limit")
    save_all(
        store,
        running("a", id="run-a", agent="bot", team="x"),
        finished("b", id="fin-b", agent="bot", team="y"),
        finished("c", id="fin-c", agent="other", team="x"),
        limited,
    )
    assert row_ids(page(client, "/?status=running")) == ["run-a"]
    assert row_ids(page(client, "/?status=finished")) == ["fin-c", "fin-b"]
    assert row_ids(page(client, "/?status=limit")) == ["lim"]
    assert row_ids(page(client, "/?agent=other")) == ["fin-c"]
    assert row_ids(page(client, "/?label=team%3Dx")) == ["fin-c", "run-a"]
    assert row_ids(page(client, "/?prefix=fin-")) == ["fin-c", "fin-b"]
    assert row_ids(page(client, "/?agent=bot&label=team%3Dy")) == ["fin-b"]
    # empty fields (a submitted form) filter nothing; the form shows what was asked
    assert len(row_ids(page(client, "/?status=&agent=&label=&prefix="))) == 4
    doc = page(client, "/?agent=nobody&prefix=x")
    assert row_ids(doc) == [] and "match" in doc.one("p", id="empty").text
    assert doc.one("input", name="agent").attrs["value"] == "nobody"


def test_runs_page_pages(store: FileStore, client: TestClient) -> None:
    save_all(store, *(running(f"task {i}", id=f"r{i}", agent="bot") for i in range(5)))
    seen: list[str] = []
    url = "/?limit=2&agent=bot"
    while url:
        doc = page(client, url)
        seen += row_ids(doc)
        following = doc.maybe("a", id="next")
        url = following.attrs["href"] if following else ""
        if url:
            assert "agent=bot" in url and "limit=2" in url  # the filters stay
    assert seen == ["r4", "r3", "r2", "r1", "r0"]


def test_an_empty_store_says_so(client: TestClient) -> None:
    doc = page(client, "/")
    assert row_ids(doc) == []
    assert "No runs" in doc.one("p", id="empty").text


# -- a run's page ------------------------------------------------------------------------


def test_run_page_shows_the_whole_timeline(store: FileStore, client: TestClient) -> None:
    state = every_kind(id="all")
    store.save(state)
    doc = page(client, "/runs/all")
    assert doc.one("h1", id="task").text == "the task"
    assert doc.one("dd", id="status").text == "limit"
    assert doc.one("dd", id="agent").text == "bot"
    assert doc.one("dd", id="turn").text == "2"
    assert doc.one("dd", id="tokens").text == "1,210 in · 39 out · 1,249 total"
    items = doc.one("ol", id="timeline").all("li", cls="entry")
    assert [li.attrs["data-seq"] for li in items] == [str(i) for i in range(len(state.history))]
    for li, entry in zip(items, state.history, strict=True):
        assert f"kind-{entry['kind']}" in li.classes
        assert li.one("span", cls="seq").text == str(entry["seq"])
        assert li.one("time", cls="at").attrs["datetime"] == entry["at"]
    assert items[0].one("span", cls="gap").text == ""
    assert all(li.one("span", cls="gap").text.startswith("+") for li in items[1:])
    assert "more please" in items[1].text
    assert "m1" in items[3].text  # the request's model
    reply = items[4]
    calls = reply.all("div", cls="tool-call")
    assert [c.one("span", cls="name").text for c in calls] == ["search", "fetch", "boom"]
    assert calls[0].one("pre", cls="args").text == '{\n  "q": "x",\n  "n": [\n    1,\n    2\n  ]\n}'
    assert calls[2].one("pre", cls="args").text == "null"
    done, unknown, failed = items[5:8]
    assert done.classes == {"entry", "kind-tool_result"}
    assert done.one("pre", cls="output").text == '{\n  "hits": 2\n}'
    assert "unknown" in unknown.classes and "error" not in unknown.classes
    assert unknown.one("pre", cls="output").text == "timed out"
    assert "error" in failed.classes and "it broke" in failed.text
    assert (
        items[8].one("code", cls="key").text == "k"
        and items[8].one("pre", cls="value").text == '{\n  "v": 1\n}'
    )
    assert "deleted" in items[9].text and items[9].maybe("pre") is None
    assert "error" in items[11].classes and "rate limited" in items[11].text
    assert "error" in items[14].classes and "ValueError: boom" in items[14].text
    assert items[15].one("strong", cls="by").text == "limit"
    assert items[15].one("pre", cls="answer").text == '{\n  "partial": true\n}'
    # nothing else stands out
    flagged = {li.attrs["data-seq"] for li in items if li.classes & {"error", "unknown"}}
    assert flagged == {"6", "7", "11", "14"}


def test_run_page_links_parent_children_and_fork_source(store: FileStore, client: TestClient) -> None:
    parent = finished("parent", id="mom")
    kids = [parent.child("one", id="kid1"), parent.child("two", id="kid2")]
    save_all(store, parent, *kids)
    store.fork("kid1", new_id="spoon", at_seq=0)
    doc = page(client, "/runs/mom")
    assert doc.maybe("a", id="parent") is None and doc.maybe("a", id="fork-source") is None
    links = doc.one("ul", id="children").all("a")
    assert sorted(a.attrs["href"] for a in links) == ["/runs/kid1", "/runs/kid2", "/runs/spoon"]
    kid = page(client, "/runs/kid1")
    assert kid.one("a", id="parent").attrs["href"] == "/runs/mom"
    assert kid.maybe("ul", id="children") is None
    fork = page(client, "/runs/spoon")
    assert fork.one("a", id="fork-source").attrs["href"] == "/runs/kid1"
    assert fork.one("a", id="parent").attrs["href"] == "/runs/mom"


def test_unknown_run_is_404_and_a_bad_id_400(client: TestClient) -> None:
    missing = client.get("/runs/nobody")
    assert missing.status_code == 404 and "nobody" in parse(missing.text).one(id="message").text
    assert client.get("/runs/not%20an%20id").status_code == 400
    assert client.get("/runs/nobody/events").status_code == 404
    assert client.get("/no/such/page").status_code == 404
    assert client.get("/?label=nokey").status_code == 400
    assert client.get("/?limit=zero").status_code == 400
    assert client.get("/?after=garbage").status_code == 400


def test_stored_markup_shows_as_text(store: FileStore, client: TestClient) -> None:
    evil(store)
    for url in ("/", "/runs/evil"):
        html = client.get(url).text
        assert "<script>window" not in html
        doc = parse(html)
        assert [s.attrs.get("src") for s in doc.all("script")] == ["/static/live.js"]
    doc = page(client, "/runs/evil")
    assert doc.one("h1", id="task").text == f"task {EVIL}"
    assert doc.one("dd", id="agent").text == f"agent {EVIL}"
    assert doc.one("pre", cls="output").text == f"output {EVIL}"
    assert EVIL in doc.one("pre", cls="value").text and EVIL in doc.one("pre", cls="args").text
    assert page(client, "/").one("td", cls="agent").text == f"agent {EVIL}"


# -- headers, methods, token ----------------------------------------------------------------


def test_every_response_has_the_security_headers(store: FileStore, client: TestClient) -> None:
    store.save(running("x", id="x1"))
    for method, url in [
        ("GET", "/"),
        ("GET", "/runs/x1"),
        ("GET", "/static/live.js"),
        ("GET", "/static/style.css"),
        ("GET", "/runs/nope"),
        ("POST", "/"),
    ]:
        response = client.request(method, url)
        assert response.headers["content-security-policy"] == CSP, url
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"


def test_pages_use_no_inline_script_or_style_nor_other_hosts(store: FileStore, client: TestClient) -> None:
    store.save(every_kind(id="all"))
    for url in ("/", "/runs/all"):
        doc = page(client, url)
        for node in doc.walk():
            assert "style" not in node.attrs and not any(a.startswith("on") for a in node.attrs)
            if node.tag == "script":
                assert node.text.strip() == "" and node.attrs["src"].startswith("/static/")
            for attr in ("src", "href"):
                assert not node.attrs.get(attr, "/").startswith(("http:", "https:", "//")), node
    assert "text/javascript" in client.get("/static/live.js").headers["content-type"]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_read_only(store: FileStore, client: TestClient, method: str) -> None:
    store.save(running("x", id="x1"))
    for url in ("/", "/runs/x1", "/runs/x1/events", "/static/live.js"):
        response = client.request(method, url)
        assert response.status_code == 405, url
    assert store.read("x1") is not None


def test_token(store: FileStore) -> None:
    store.save(running("secret run", id="s1"))
    app = create_app(store, token="t0k3n")
    with TestClient(app, base_url=LOCAL, follow_redirects=False) as anon:
        refused = anon.get("/")
        assert refused.status_code == 401 and "secret run" not in refused.text
        assert "token" in parse(refused.text).one(id="message").text
        assert anon.get("/runs/s1").status_code == 401
        assert anon.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert anon.get("/?token=wrong").status_code == 401
        assert anon.get("/", headers={"Cookie": "statekeep_token_8765=wrong"}).status_code == 401
        # the cookie of a viewer on another port (cookies do not tell ports apart) is not this one's
        assert anon.get("/", headers={"Cookie": "statekeep_token_9999=t0k3n"}).status_code == 401
        assert anon.get("/", headers={"Cookie": "statekeep_token_8765=t0k3n"}).status_code == 200
        ok = anon.get("/", headers={"Authorization": "Bearer t0k3n"})
        assert ok.status_code == 200 and "secret run" in ok.text
    with TestClient(app, base_url=LOCAL, follow_redirects=False) as browser:
        moved = browser.get("/runs/s1?token=t0k3n&x=1")
        assert moved.status_code == 303 and moved.headers["location"] == "/runs/s1?x=1"
        cookie = moved.headers["set-cookie"]
        assert cookie.startswith("statekeep_token_8765=t0k3n;")  # one per port: viewers side by side
        assert {"httponly", "samesite=strict", "path=/"} <= {p.strip().lower() for p in cookie.split(";")}
        assert moved.headers["content-security-policy"] == CSP
        kept = browser.get("/runs/s1")  # the cookie from now on
        assert kept.status_code == 200 and "secret run" in kept.text


def test_a_failing_store_is_a_short_500_page(store: FileStore) -> None:
    class Broken(FileStore):
        async def alist(self, **filters: object) -> list:  # type: ignore[override]
            raise ConnectionError("postgresql://u:hunter2@db/x is gone")

    with (
        Broken(store.path) as broken,
        TestClient(create_app(broken), base_url=LOCAL, raise_server_exceptions=False) as c,
    ):
        response = c.get("/")
    assert response.status_code == 500
    assert response.headers["content-security-policy"] == CSP
    text = parse(response.text).one(id="message").text
    assert "ConnectionError" in text and "is gone" in text and "hunter2" not in text


# -- the Host header (DNS rebinding) ---------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["localhost", "127.0.0.1", "[::1]", "localhost:8765", "127.0.0.1:1", "[::1]:80"]
)
def test_a_loopback_host_header_is_served(store: FileStore, host: str) -> None:
    store.save(running("mine", id="m1"))
    with TestClient(create_app(store)) as c:
        response = c.get("/", headers={"Host": host})
    assert response.status_code == 200 and "mine" in response.text


@pytest.mark.parametrize("token", [None, "t0k3n"])
def test_another_host_header_is_refused_on_a_loopback_bind(store: FileStore, token: str | None) -> None:
    """A page of evil.example whose name now points at 127.0.0.1 (DNS rebinding) reads nothing,
    with or without a token (a token in a cookie would not be sent to it, but a bearer might)."""
    store.save(running("secret run", id="s1"))
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    with TestClient(create_app(store, token=token), base_url="http://evil.example:8765") as c:
        for url in ("/", "/runs/s1", "/runs/s1/events", "/events/runs", "/static/live.js"):
            response = c.get(url, headers=auth)
            assert response.status_code == 421, url
            assert "secret run" not in response.text
            assert response.headers["content-security-policy"] == CSP
        assert "Host" in parse(c.get("/").text).one(id="message").text


def test_the_bound_host_name_is_served(store: FileStore) -> None:
    store.save(running("mine", id="m1"))
    with TestClient(create_app(store, host="127.0.0.2"), base_url="http://127.0.0.2:9000") as c:
        assert c.get("/").status_code == 200
    app = create_app(store, token="t0k3n", host="0.0.0.0")  # open to other machines: any name
    with TestClient(app, base_url="http://viewer.example:8765") as c:
        assert c.get("/", headers={"Authorization": "Bearer t0k3n"}).status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "//evil.example/x",
        "///evil.example/x",
        "/%2F%2Fevil.example/x",
        "/%5Cevil.example/x",
        "/\\evil.example",
    ],
)
def test_the_token_step_redirects_only_within_the_viewer(store: FileStore, path: str) -> None:
    with TestClient(create_app(store, token="t0k3n"), base_url=LOCAL, follow_redirects=False) as c:
        moved = c.get(f"{path}?token=t0k3n")
    assert moved.status_code == 303
    target = moved.headers["location"]
    assert target.startswith("/") and target[1:2] not in ("/", "\\", "%"), target  # not //host


@pytest.mark.parametrize("token", ["", "   "])
def test_an_empty_token_is_refused(store: FileStore, token: str) -> None:
    from statekeep.web import serve, start

    for make in (create_app, serve, start):
        with pytest.raises(ValueError, match="empty token"):
            make(store, token=token)  # type: ignore[operator]


# -- what a page costs the store ---------------------------------------------------------------


class Counting(FileStore):
    """A FileStore that counts its listings (each a scan of every State on a FileStore)."""

    listings = 0

    async def alist(self, **filters: object) -> Any:  # type: ignore[override]
        Counting.listings += 1
        return await super().alist(**filters)  # type: ignore[arg-type]


def test_the_runs_page_counts_children_without_a_listing_per_row(store: FileStore) -> None:
    parents = [finished(f"parent {i}", id=f"p{i}") for i in range(6)]
    kids = [p.child(f"kid {j}", id=f"{p.id}-k{j}") for p in parents for j in range(int(p.id[1:]))]
    save_all(store, *parents, *kids)
    with Counting(store.path) as counting, TestClient(create_app(counting), base_url=LOCAL) as c:
        Counting.listings = 0
        doc = page(c, "/")
        assert Counting.listings <= 2  # the rows, and their children in one go
    counts = {tr.attrs["data-id"]: tr.one("td", cls="children").text for tr in doc.all("tr", cls="run")}
    assert {p.id: counts[p.id] for p in parents} == {f"p{i}": str(i) for i in range(6)}
    assert {counts[k.id] for k in kids} == {"0"}


def test_a_runs_page_has_at_most_200_rows() -> None:
    store = MemoryStore()
    save_all(store, *(running(f"task {i}", id=f"r{i:03}") for i in range(201)))
    with TestClient(create_app(store), base_url=LOCAL) as c:
        doc = page(c, "/?limit=100000")
        assert len(row_ids(doc)) == 200
        following = doc.one("a", id="next").attrs["href"]
        assert row_ids(page(c, following)) == ["r000"]
        assert c.get("/?limit=0").status_code == 400


def test_children_are_counted_past_the_one_listing_too(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import statekeep.web._children

    monkeypatch.setattr(statekeep.web._children, "MAX_SCAN", 2)  # more States than one listing holds
    parent = finished("parent", id="mom")
    save_all(store, parent, *(parent.child(f"kid {j}", id=f"kid{j}") for j in range(3)))
    with TestClient(create_app(store), base_url=LOCAL) as c:
        assert page(c, "/").one("tr", data_id="mom").one("td", cls="children").text == "3"


def test_a_long_run_shows_its_last_500_entries_and_links_to_earlier_ones() -> None:
    store = MemoryStore()
    state = running("long one", id="long", agent="bot")  # seq 0-2
    for i in range(600):
        state.add_reply(f"reply {i}", usage={"input_tokens": 1, "output_tokens": 1})
        state.request("m1")
    store.save(state)  # seqs 0 to 1202
    with TestClient(create_app(store), base_url=LOCAL) as c:
        doc = page(c, "/runs/long")
        seqs = [int(li.attrs["data-seq"]) for li in doc.one("ol", id="timeline").all("li", cls="entry")]
        assert seqs == list(range(703, 1203))
        assert doc.one("dd", id="tokens").text == "600 in · 600 out · 1,200 total"  # the whole run
        earlier = doc.one("p", id="earlier")
        assert (
            "703 earlier entries" in earlier.text
            and earlier.one("a").attrs["href"] == "/runs/long?before=703"
        )
        assert doc.one("li", data_seq="703").one("span", cls="gap").text.startswith("+")
        doc = page(c, "/runs/long?before=703")
        seqs = [int(li.attrs["data-seq"]) for li in doc.one("ol", id="timeline").all("li", cls="entry")]
        assert seqs == list(range(203, 703))
        assert doc.one("p", id="earlier").one("a").attrs["href"] == "/runs/long?before=203"
        assert "data-events" not in doc.one("body").attrs  # an earlier window does not grow
        doc = page(c, "/runs/long?before=203")
        assert doc.all("li", cls="entry")[0].attrs["data-seq"] == "0"
        assert (
            doc.maybe("p", id="earlier") is None
            and doc.one("p", id="later").one("a").attrs["href"] == "/runs/long"
        )
        assert c.get("/runs/long?before=x").status_code == 400


def test_each_runs_row_shows_its_id_and_whose_child_or_fork_it_is(
    store: FileStore, client: TestClient
) -> None:
    parent = finished("parent", id="mom")
    save_all(store, parent, parent.child("kid", id="kid1"))
    store.fork("mom", new_id="spoon", at_seq=0)
    doc = page(client, "/")
    ids = {
        tr.attrs["data-id"]: tr.one("td", cls="task").one("code", cls="id").text
        for tr in doc.all("tr", cls="run")
    }
    assert ids == {"mom": "mom", "kid1": "kid1", "spoon": "spoon"}
    lineage = {tr.attrs["data-id"]: tr.maybe("span", cls="lineage") for tr in doc.all("tr", cls="run")}
    assert lineage["mom"] is None
    assert lineage["kid1"] is not None and lineage["kid1"].text == "child of mom"
    assert lineage["spoon"] is not None and lineage["spoon"].text == "fork of mom"
    # the status colour is the status cell's only, not the whole row's
    assert not any(c.startswith("status-") for tr in doc.all("tr", cls="run") for c in tr.classes)


def test_the_filter_form_keeps_every_label_asked(store: FileStore, client: TestClient) -> None:
    save_all(store, running("a", id="both", team="x", env="prod"), running("b", id="one", team="x"))
    doc = page(client, "/?label=team%3Dx&label=env%3Dprod")
    assert row_ids(doc) == ["both"]
    boxes = doc.one("form", id="filters").all("input", name="label")
    assert [box.attrs["value"] for box in boxes] == ["team=x", "env=prod"]  # submitting it again keeps both


def test_only_valid_ids_become_links() -> None:
    store = MemoryStore()
    store.save(running("t", id="a1"))
    record = store.read("a1")
    assert record is not None
    entries = [dict(record.entries[0], parent="javascript:alert(1)"), *record.entries[1:]]
    snapshot = dict(
        record.snapshot, parent="javascript:alert(1)", forked_from={"id": "//evil.example", "seq": 0}
    )
    store.write("bad1", entries, snapshot, create=True)
    with TestClient(create_app(store), base_url=LOCAL) as c:
        doc = page(c, "/runs/bad1")
    assert (
        doc.maybe("a", id="parent") is None
        and doc.one("span", id="parent-text").text == "javascript:alert(1)"
    )
    assert (
        doc.maybe("a", id="fork-source") is None and doc.one(id="fork-source-text").text == "//evil.example"
    )
    assert not [
        a
        for a in doc.all("a")
        if "evil" in a.attrs.get("href", "") or "javascript" in a.attrs.get("href", "")
    ]


def test_websockets_are_refused(client: TestClient) -> None:
    from starlette.websockets import WebSocketDisconnect

    for url in ("/", "/events/runs", "/runs/x1/events"):
        with pytest.raises(WebSocketDisconnect) as refused, client.websocket_connect(url):
            pass
        assert refused.value.code == 1008  # policy violation, from the guard
