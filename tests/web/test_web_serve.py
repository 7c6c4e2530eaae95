"""``statekeep serve`` as a user runs it: a process of its own over every kind of store,
its serving line, its live streams while another process writes, the token, the refusal of
an open host without one, a clean stop, and statekeep.web.start over a MemoryStore."""

from __future__ import annotations

import base64
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import orjson
import pytest

from statekeep import FileStore, Keyring, MemoryStore, Store
from statekeep.stores._urls import open_store
from statekeep.web import start
from tests.support import servers
from tests.support.web_runs import EVIL, finished, running
from tests.support.web_serving import (
    client,
    events,
    read_line,
    reap_servers,
    serving,
    start_serve,
    stop,
    until,
    url_of,
)
from tests.support.webpage import parse


def store_url(kind: str, tmp_path: Path) -> str:
    """Where a store of ``kind`` lives, as ``--store`` names it (a namespace of its own on
    the shared servers)."""
    if kind == "file":
        return str(tmp_path / "store")
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    name = servers.unique_name("web")
    base = servers.shared_postgres().dsn if kind == "postgres" else servers.shared_redis().url
    return f"{base}?namespace={name}"


@pytest.fixture(autouse=True)
def _reap() -> Iterator[None]:
    yield
    reap_servers()


def a_store(tmp_path: Path) -> str:
    """A FileStore holding one run (a FileStore's folder appears with its first save)."""
    with FileStore(tmp_path / "store") as store:
        store.save(running("one run"))
    return str(tmp_path / "store")


@pytest.fixture(params=["file", "sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request.param, tmp_path)


@pytest.fixture
def writer(url: str) -> Iterator[Store]:
    """The store ``url`` names, opened by this process: another writer than the server."""
    with open_store(url) as store:
        yield store


def test_serve_shows_runs_of_every_store_and_grows_live(url: str, writer: Store) -> None:
    done = finished("finished long ago", id="old")
    live = running("work in progress", id="live", agent="bot")
    writer.save(done)
    writer.save(live)
    with serving("--store", url) as base, client() as http:
        doc = parse(http.get(base).text)
        assert [tr.attrs["data-id"] for tr in doc.all("tr", cls="run")] == ["live", "old"]
        assert "finished long ago" in http.get(base + "runs/old").text
        last = len(live.history) - 1
        with http.stream("GET", f"{base}runs/live/events?after={last}") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            stream = events(response)
            assert until(stream, "summary")["status"] == "running"  # the stream is open
            live.add_reply(
                f"thinking {EVIL}",
                [{"id": "c1", "name": "search", "args": {"q": 1}}],
                usage={"input_tokens": 7, "output_tokens": 2},
            )
            writer.save(live)
            entry = until(stream, "entry", seq=last + 1)
            li = parse(entry["html"]).one("li", data_seq=str(last + 1))
            assert "kind-model_reply" in li.classes
            assert f"thinking {EVIL}" in li.text and "<script>" not in entry["html"]
            assert li.one("pre", cls="args").text == '{\n  "q": 1\n}'
            assert li.one("span", cls="gap").text.startswith("+")
            summary = until(stream, "summary")
            assert (summary["turn"], summary["tokens"]) == ("1", "7 in · 2 out · 9 total")
            live.add_tool_result("c1", "found")
            live.finish("all done")
            writer.save(live)
            seqs = [until(stream, "entry")["seq"] for _ in range(2)]
            assert seqs == [last + 2, last + 3]
            assert until(stream, "summary")["status"] == "finished"
            assert until(stream, "end")["reason"] == "finished"
            assert list(stream) == []  # the stream is over once the run has stopped


def test_runs_feed_sends_new_runs_as_they_are_saved(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with FileStore(path) as writer:
        writer.save(finished("already there", id="there", agent="bot"))
        since = datetime.now(UTC).isoformat()
        with serving("--store", str(path)) as base, client() as http:
            feed = f"{base}events/runs?agent=bot&since={quote(since)}"
            with http.stream("GET", feed) as response:
                stream = events(response)
                writer.save(running("not by bot", id="other", agent="someone"))
                writer.save(running(f"new {EVIL}", id="new", agent="bot"))
                row = until(stream, "row")
                assert row["id"] == "new"  # not "there" (older), nor "other" (filtered out)
                tr = parse(row["html"]).one("tr", cls="run", data_id="new")
                assert tr.one("td", cls="task").one("a").text == f"new {EVIL}"
                assert tr.one("td", cls="status").text == "running"


def test_run_events_resume_after_the_seq_given(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with FileStore(path) as writer:
        state = running("resume me", id="r", agent="bot")
        writer.save(state)
        with serving("--store", str(path)) as base, client() as http:
            with http.stream("GET", f"{base}runs/r/events", headers={"Last-Event-ID": "1"}) as response:
                assert until(events(response), "entry")["seq"] == 2  # after the browser's last one
            assert http.get(f"{base}runs/r/events?after=x").status_code == 400


def test_serve_refuses_an_open_host_without_a_token(tmp_path: Path) -> None:
    proc = start_serve("--store", a_store(tmp_path), "--host", "0.0.0.0", "--port", "0")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == b""
    lines = err.decode().splitlines()
    assert len(lines) == 1 and "--token" in lines[0] and lines[0].startswith("statekeep: ")


def test_serve_with_a_token_on_an_open_host(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with FileStore(path) as store:
        store.save(running("guarded", id="g"))
    with serving("--store", str(path), "--host", "0.0.0.0", env={"STATEKEEP_TOKEN": "s3cret"}) as base:
        port = base.rstrip("/").rsplit(":", 1)[1]
        local = f"http://127.0.0.1:{port}/"
        with client() as http:
            assert http.get(local).status_code == 401
            assert "guarded" in http.get(local, headers={"Authorization": "Bearer s3cret"}).text
        with client(follow_redirects=True) as browser:
            assert "guarded" in browser.get(local + "runs/g?token=s3cret").text
            assert "guarded" in browser.get(local + "runs/g").text  # the cookie


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_stops_cleanly(tmp_path: Path, sig: int) -> None:
    proc = start_serve("--store", a_store(tmp_path), "--port", "0")
    base = url_of(proc)
    with client() as http, http.stream("GET", base + "events/runs") as response:
        assert response.status_code == 200  # an open stream does not keep it from stopping
        status, err = stop(proc, sig)
    assert status == 0 and err == ""


def test_serve_a_taken_port_is_one_line(tmp_path: Path) -> None:
    with serving("--store", a_store(tmp_path)) as base:
        port = base.rstrip("/").rsplit(":", 1)[1]
        proc = start_serve("--store", str(tmp_path / "store"), "--port", port)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.decode().count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in err.decode()


def test_serve_without_a_store_says_so(tmp_path: Path) -> None:
    proc = start_serve("--store", str(tmp_path / "nothing"), "--port", "0")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "no store at" in err.decode()


@pytest.mark.parametrize(
    ("where", "status", "said"), [("memory", 2, "memory://"), ("not-a-store", 3, "not a statekeep store")]
)
def test_serve_refuses_a_store_it_could_show_nothing_of(
    tmp_path: Path, where: str, status: int, said: str
) -> None:
    # It once served both, and every page was then an error.
    url = "memory://"
    if where == "not-a-store":
        (tmp_path / "notes").mkdir()
        (tmp_path / "notes" / "shopping.txt").write_text("milk\n")
        url = str(tmp_path / "notes")
    proc = start_serve("--store", url, "--port", "0")
    assert read_line(proc) == ""  # no serving line: it ends at once
    _, err = proc.communicate(timeout=60)
    lines = err.decode().splitlines()
    assert proc.returncode == status, lines
    assert len(lines) == 1 and lines[0].startswith("statekeep: ") and said in lines[0], lines


def test_serve_without_the_web_extra_says_what_to_install(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['starlette'] = None; from statekeep.cli import main; "
        f"main(['serve', '--store', {str(tmp_path)!r}])"
    )
    proc = start_serve(code=code)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.decode().strip() == "statekeep: the viewer needs the web extra: pip install 'statekeep[web]'"


def test_serve_an_encrypted_store_with_its_keys(tmp_path: Path) -> None:
    key = os.urandom(32)
    keys = tmp_path / "keys.json"
    keys.write_bytes(orjson.dumps({"current": "k1", "keys": {"k1": base64.b64encode(key).decode()}}))
    path = tmp_path / "store"
    with FileStore(path, encrypt=Keyring({"k1": key}, current="k1")) as store:
        store.save(finished("sealed task", id="enc"))
    with serving("--store", str(path), "--keys", str(keys)) as base, client() as http:
        assert "sealed task" in http.get(base).text
        doc = parse(http.get(base + "runs/enc").text)
        assert doc.one("h1", id="task").text == "sealed task"
        assert "the answer" in doc.one("ol", id="timeline").text
    with serving("--store", str(path)) as base, client() as http:
        assert "sealed task" not in http.get(base).text
        for url in ("runs/enc", "runs/enc/events"):
            locked = http.get(base + url)
            assert locked.status_code == 403, url
            assert "sealed task" not in locked.text and "--keys" in parse(locked.text).one(id="message").text


def test_start_serves_a_memory_store_in_the_same_process() -> None:
    store = MemoryStore()
    state = running("in memory", id="mem", agent="bot")
    store.save(state)
    with start(store) as viewer:
        assert viewer.url.startswith("http://127.0.0.1:")
        with client() as http:
            assert "in memory" in http.get(viewer.url).text
            with http.stream("GET", viewer.url + "runs/mem/events?after=2") as response:
                stream = events(response)
                until(stream, "summary")
                state.add_reply("from memory")
                store.save(state)
                assert "from memory" in until(stream, "entry", seq=3)["html"]
    with pytest.raises(OSError), urllib.request.urlopen(viewer.url, timeout=5):
        pass  # stopped: nothing listens any more


def test_python_serve_prints_the_serving_line_and_stops_on_sigterm() -> None:
    code = (
        "from statekeep import MemoryStore, State\n"
        "from statekeep.web import serve\n"
        "store = MemoryStore(); store.save(State('memory run', id='m'))\n"
        "serve(store, port=0)\n"
        "print('returned', flush=True)\n"
    )
    proc = start_serve(code=code)
    base = url_of(proc)
    with client() as http:
        assert "memory run" in http.get(base).text
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.decode() == "returned\n"  # serve() returned normally


def test_serve_open_opens_the_browser_on_the_url(tmp_path: Path) -> None:
    opened = tmp_path / "opened"
    fake = tmp_path / "browser.py"
    fake.write_text(f"import sys, pathlib; pathlib.Path({str(opened)!r}).write_text(sys.argv[1])\n")
    env = {"BROWSER": f"{sys.executable} {fake} %s"}
    with serving("--store", a_store(tmp_path), "--open", env=env) as base:
        end = time.monotonic() + 60
        while not (opened.exists() and opened.read_text()):
            assert time.monotonic() < end, "the browser was not opened"
            time.sleep(0.05)  # polling for the file the fake browser writes
        assert opened.read_text() == base


def test_serve_refuses_an_empty_token(tmp_path: Path) -> None:
    proc = start_serve("--store", a_store(tmp_path), "--port", "0", "--token", "")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == b""
    lines = err.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("statekeep: ") and "empty token" in lines[0]


def fake_browser(tmp_path: Path, *, hang: bool = False) -> tuple[Path, dict[str, str]]:
    """A $BROWSER that writes the URL it is given (and its pid) to a file; with ``hang``, it
    then waits for its end, as a console browser does while the user reads."""
    opened = tmp_path / "opened"
    fake = tmp_path / "browser.py"
    # (closing the server's stdout and stderr it inherited, which the test reads to their end)
    rest = "import os, time; os.close(1); os.close(2); time.sleep(3600)" if hang else ""
    fake.write_text(
        f"import os, sys, pathlib; pathlib.Path({str(opened)!r}).write_text(f'{{os.getpid()}} {{sys.argv[1]}}')\n"
        f"{rest}\n"
    )
    return opened, {"BROWSER": f"{sys.executable} {fake} %s"}


def wait_opened(opened: Path) -> tuple[int, str]:
    """The fake browser's pid and the URL it was opened on, once it was."""
    end = time.monotonic() + 60
    while not (opened.exists() and " " in opened.read_text()):
        assert time.monotonic() < end, "the browser was not opened"
        time.sleep(0.05)  # polling for the file the fake browser writes
    pid, url = opened.read_text().split(" ", 1)
    return int(pid), url


def test_serve_open_with_a_token_opens_the_url_with_it(tmp_path: Path) -> None:
    opened, env = fake_browser(tmp_path)
    with serving("--store", a_store(tmp_path), "--open", env={**env, "STATEKEEP_TOKEN": "s3cret"}) as base:
        _, url = wait_opened(opened)
        assert url == base + "?token=s3cret"
        with client(follow_redirects=True) as browser:
            assert "one run" in browser.get(url).text  # the token step lets the browser in


def test_serve_open_with_a_browser_that_does_not_return_still_serves_and_stops(tmp_path: Path) -> None:
    opened, env = fake_browser(tmp_path, hang=True)
    proc = start_serve("--store", a_store(tmp_path), "--port", "0", "--open", env=env)
    base = url_of(proc)
    pid, _ = wait_opened(opened)
    try:
        with client() as http:
            assert "one run" in http.get(base).text
        status, err = stop(proc)
        assert status == 0, err
    finally:
        os.kill(pid, signal.SIGKILL)


def test_a_gone_live_client_is_no_log_line(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    with start(MemoryStore()):
        # what asyncio logs once a closed tab's stream has been written to a few times
        logging.getLogger("asyncio").warning("socket.send() raised exception.")
        logging.getLogger("asyncio").warning("something else")
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == ["something else"]
