"""The ``statekeep`` command for runs as data: ``list`` filters, pages and ``--json``; ``gc``;
``fork``; ``delete --children``. Run in-process with click's CliRunner, and on a terminal
(a pty) for the questions."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from statekeep import FileStore, State, agent_info, open_store
from statekeep.cli import main
from tests.cli.test_cli import on_terminal
from tests.support.stores import URL_KINDS, store_url

PAST = datetime(2020, 1, 1, tzinfo=UTC)
FUTURE = datetime(2100, 1, 1, tzinfo=UTC)


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def ids(output: str) -> list[str]:
    return [line.split()[0] for line in output.splitlines()[1:]]


def save(store: FileStore, state: State, agent: str | None = None) -> None:
    if agent is not None:
        state.begin_run(agent_info(agent, "some-model"))
    store.save(state)


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    """root (planner, env=prod) with children k1 (coder, env=prod, user=u1) and k2 (coder,
    finished); g1 a child of k1; solo (no agent), stopped by the limit; saved in that order."""
    path = tmp_path / "store"
    store = FileStore(path)
    root = State("Plan", id="root", labels={"env": "prod"})
    save(store, root, "planner")
    save(store, root.child("Search", id="k1", labels={"env": "prod", "user": "u1"}), "coder")
    k2 = root.child("Write", id="k2")
    k2.begin_run(agent_info("coder", "some-model"))
    k2.finish("done")
    save(store, k2)
    save(store, State("Deeper", id="g1", parent="k1"))
    solo = State("Alone", id="solo")
    solo.stop("limit")
    save(store, solo)
    store.close()
    return path


# -- list ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], ["solo", "g1", "k2", "k1", "root"]),
        (["--agent", "coder"], ["k2", "k1"]),
        (["--parent", "root"], ["k2", "k1"]),
        (["--label", "env=prod"], ["k1", "root"]),
        (["--label", "env=prod", "--label", "user=u1"], ["k1"]),
        (["--status", "finished"], ["k2"]),
        (["--status", "limit"], ["solo"]),
        (["--status", "running", "--parent", "k1"], ["g1"]),
        (["--agent", "coder", "--status", "running"], ["k1"]),
    ],
)
def test_list_filters(fleet: Path, args: list[str], expected: list[str]) -> None:
    result = cli("list", "--store", str(fleet), *args)
    assert result.exit_code == 0, result.output
    assert ids(result.stdout) == expected
    assert result.stderr == ""


def test_list_says_when_nothing_matches(fleet: Path) -> None:
    result = cli("list", "--store", str(fleet), "--agent", "nobody")
    assert (result.exit_code, result.stdout) == (0, "no States match\n")


def test_list_pages_with_limit_and_after(fleet: Path) -> None:
    first = cli("list", "--store", str(fleet), "--limit", "3")
    assert first.exit_code == 0 and ids(first.stdout) == ["solo", "g1", "k2"]
    assert first.stderr.startswith("more: pass --after ")
    after = first.stderr.split()[3]
    second = cli("list", "--store", str(fleet), "--limit", "3", "--after", after)
    assert (second.exit_code, ids(second.stdout), second.stderr) == (0, ["k1", "root"], "")


def test_list_json_is_one_object_per_line(fleet: Path) -> None:
    result = cli("list", "--store", str(fleet), "--json", "--parent", "root", "--limit", "1")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and "more: pass --after" in result.stderr
    row = json.loads(lines[0])
    assert (row["id"], row["agent"], row["parent"], row["status"], row["finished"]) == (
        "k2", "coder", "root", "finished", True,
    )  # fmt: skip
    assert (row["labels"], row["expires_at"], row["forked_from"], row["turn"]) == ({}, None, None, 0)
    assert datetime.fromisoformat(row["updated_at"]).tzinfo is not None
    everything = cli("list", "--store", str(fleet), "--json")
    assert [json.loads(line)["id"] for line in everything.stdout.splitlines()] == [
        "solo", "g1", "k2", "k1", "root",
    ]  # fmt: skip


def test_list_json_escapes_what_a_terminal_would_act_on(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    store.save(State("evil \x1b[2J\u2028task", id="evil", labels={"note": "\x1b]0;x\x07"}))
    result = cli("list", "--store", str(tmp_path / "store"), "--json")
    assert result.exit_code == 0
    assert "\x1b" not in result.stdout and "\u2028" not in result.stdout
    row = json.loads(result.stdout)
    assert (row["task"], row["labels"]) == ("evil \x1b[2J\u2028task", {"note": "\x1b]0;x\x07"})


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--label", "novalue"], "KEY=VALUE"),
        (["--label", "bad key!=x"], "--label"),
        (["--limit", "0"], "limit"),
        (["--limit", "many"], "limit"),
        (["--after", "junk"], "after"),
        (["--parent", "not an id"], "parent"),
        (["--status", ""], "status"),
    ],
)
def test_list_bad_filters_exit_2_naming_them(fleet: Path, args: list[str], named: str) -> None:
    result = cli("list", "--store", str(fleet), *args)
    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("kind", URL_KINDS)
def test_list_prefix_keeps_the_ids_that_start_with_it(kind: str, tmp_path: Path) -> None:
    url = store_url(kind, tmp_path, "prefix")
    with open_store(url, create=True) as store:
        for sid in ("job-1", "job-2", "jobless", "other"):
            store.save(State(sid, id=sid))
    result = cli("list", "--store", url, "--prefix", "job-")
    assert (result.exit_code, result.stderr) == (0, ""), result.output
    assert sorted(ids(result.stdout)) == ["job-1", "job-2"]
    both = cli("list", "--store", url, "--prefix", "job", "--json", "--status", "running")
    assert sorted(json.loads(line)["id"] for line in both.stdout.splitlines()) == [
        "job-1",
        "job-2",
        "jobless",
    ]
    none = cli("list", "--store", url, "--prefix", "nobody")
    assert (none.exit_code, none.stdout) == (0, "no States match\n")
    bad = cli("list", "--store", url, "--prefix", "no way")
    assert bad.exit_code == 2 and "--prefix" in bad.output and "A-Z a-z 0-9 _ -" in bad.output


# -- gc -------------------------------------------------------------------------------------------


@pytest.fixture
def expiring(tmp_path: Path) -> Path:
    """Two States past their expiry (old1, old2) and one that is not (young)."""
    path = tmp_path / "store"
    store = FileStore(path)
    for sid, when in (("old1", PAST), ("old2", PAST), ("young", FUTURE)):
        state = State(sid, id=sid)
        state.expire_at(when)
        store.save(state)
    store.close()
    return path


def left(path: Path) -> list[str]:
    with FileStore(path) as store:
        return sorted(sid for sid in ("old1", "old2", "young") if store.read(sid) is not None)


def stored(path: Path) -> list[str]:
    """The State folders on disk (an expired State reads as absent until gc removes it)."""
    return sorted(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def test_gc_dry_run_counts_and_removes_nothing(expiring: Path) -> None:
    result = cli("gc", "--store", str(expiring), "--dry-run")
    assert (result.exit_code, result.stdout) == (0, "2 expired States would be removed\n")
    assert stored(expiring) == ["old1", "old2", "young"]


def test_gc_without_a_terminal_needs_yes(expiring: Path) -> None:
    result = cli("gc", "--store", str(expiring))
    assert result.exit_code == 2 and "pass --yes" in result.stderr
    assert stored(expiring) == ["old1", "old2", "young"]


def test_gc_with_yes_removes_the_expired_and_prints_the_count(expiring: Path) -> None:
    result = cli("gc", "--store", str(expiring), "--yes")
    assert (result.exit_code, result.stdout) == (0, "removed 2 expired States\n"), result.output
    assert stored(expiring) == ["young"] and left(expiring) == ["young"]
    again = cli("gc", "--store", str(expiring), "--yes")
    assert (again.exit_code, again.stdout) == (0, "removed 0 expired States\n")


@pytest.mark.parametrize(("answer", "code"), [("n", 1), ("y", 0)])
def test_gc_asks_on_a_terminal(expiring: Path, answer: str, code: int) -> None:
    status, out, err = on_terminal(answer, "gc", "--store", str(expiring))
    assert status == code, err
    assert "Remove the 2 expired States (and any that expire meanwhile)? [y/N]" in err
    assert stored(expiring) == (["young"] if code == 0 else ["old1", "old2", "young"])
    assert out == ("removed 2 expired States\n" if code == 0 else "")


@pytest.fixture
def expiring_sqlite(tmp_path: Path) -> str:
    """The same States in a SQLite store, whose listings come from indexes."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with open_store(url) as store:
        for sid, when in (("old1", PAST), ("old2", PAST), ("young", FUTURE)):
            state = State(sid, id=sid)
            state.expire_at(when)
            store.save(state)
    return url


def test_gc_dry_run_counts_on_an_indexed_store_too(expiring_sqlite: str) -> None:
    for _ in range(2):  # the dry run removed nothing: the count stays
        result = cli("gc", "--store", expiring_sqlite, "--dry-run")
        assert (result.exit_code, result.stdout) == (0, "2 expired States would be removed\n")


@pytest.mark.parametrize(("answer", "code"), [("n", 1), ("y", 0)])
def test_gc_asks_on_an_indexed_store_too(expiring_sqlite: str, answer: str, code: int) -> None:
    status, _, err = on_terminal(answer, "gc", "--store", expiring_sqlite)
    assert status == code, err
    assert "Remove the 2 expired States (and any that expire meanwhile)? [y/N]" in err
    after = cli("gc", "--store", expiring_sqlite, "--dry-run")
    assert after.stdout == ("0" if code == 0 else "2") + " expired States would be removed\n"


def test_gc_of_a_missing_store_exits_1(tmp_path: Path) -> None:
    result = cli("gc", "--store", str(tmp_path / "nowhere"), "--yes")
    assert result.exit_code == 1 and "no store at" in result.stderr
    assert not (tmp_path / "nowhere").exists()


# -- fork -----------------------------------------------------------------------------------------


def test_fork_copies_up_to_a_seq(fleet: Path) -> None:
    result = cli("fork", "k1", "--at", "0", "--new-id", "k1-again", "--store", str(fleet))
    assert (result.exit_code, result.stdout) == (0, "forked k1 at seq 0 to k1-again\n"), result.output
    with FileStore(fleet) as store:
        copy = store.load("k1-again")
        assert copy.forked_from == {"id": "k1", "seq": 0} and len(copy.history) == 1
        assert copy.labels == {"env": "prod", "user": "u1"} and copy.parent == "root"
        assert len(store.load("k1").history) == 2  # the source is unchanged


def test_fork_whole_history_to_a_new_id(fleet: Path) -> None:
    result = cli("fork", "k2", "--store", str(fleet))
    assert result.exit_code == 0, result.output
    made = result.stdout.split()[-1]
    assert result.stdout.startswith("forked k2 at seq 2 to ")
    with FileStore(fleet) as store:
        assert store.load(made).finished


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["nobody"], 1, "nobody"),
        (["k1", "--new-id", "root"], 2, "already exists"),
        (["k1", "--new-id", "not an id"], 2, "not a State id"),
        (["k1", "--at", "9"], 2, "at_seq"),
    ],
)
def test_fork_mistakes(fleet: Path, args: list[str], code: int, says: str) -> None:
    before = stored(fleet)
    result = cli("fork", *args, "--store", str(fleet))
    assert result.exit_code == code, result.output
    assert says in result.output and "Traceback" not in result.output
    assert stored(fleet) == before


# -- delete --children -----------------------------------------------------------------------------


def test_delete_children_removes_the_tree(fleet: Path) -> None:
    result = cli("delete", "root", "--children", "--yes", "--store", str(fleet))
    assert result.exit_code == 0, result.output
    assert result.stdout == "deleted root and the 3 States spawned from it\n"
    assert stored(fleet) == ["solo"]


def test_delete_without_children_keeps_them(fleet: Path) -> None:
    assert cli("delete", "k1", "--yes", "--store", str(fleet)).exit_code == 0
    assert stored(fleet) == ["g1", "k2", "root", "solo"]


def test_delete_children_without_a_terminal_needs_yes(fleet: Path) -> None:
    result = cli("delete", "root", "--children", "--store", str(fleet))
    assert result.exit_code == 2 and "pass --yes" in result.stderr
    assert stored(fleet) == ["g1", "k1", "k2", "root", "solo"]


@pytest.mark.parametrize(("answer", "code"), [("n", 1), ("y", 0)])
def test_delete_children_asks_on_a_terminal(fleet: Path, answer: str, code: int) -> None:
    status, _, err = on_terminal(answer, "delete", "root", "--children", "--store", str(fleet))
    assert status == code, err
    assert "Delete it and the 3 States spawned from it? [y/N]" in err
    assert stored(fleet) == (["solo"] if code == 0 else ["g1", "k1", "k2", "root", "solo"])
