"""The upgrade rule for the incarnation (issue 21, items 2 and 27): the last release's
statekeep, run beside this one on one store, refuses what this one writes where it would
misread it, and this one keeps reading and writing what the older one made.

Each persistent store changed its format once for it: FileStore log format 3 (a State's
closing records carry its incarnation; a State made before keeps format 2), SQLite
schema 4, PostgreSQL schema 4, Redis layout 3.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import statekeep as sk
from statekeep import Keyring, Store
from tests.support.older import run_older
from tests.support.stores import servers

pytest.importorskip("cryptography")

KEY = bytes(range(32))
KINDS = ["file", "sqlite", "postgres", "redis"]


class Place:
    """One store's place, opened by this statekeep or (as code) by the older one."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        if kind == "file":
            self.args = f"{str(tmp_path / 'store')!r}"
        elif kind == "sqlite":
            self.args = f"{str(tmp_path / 'store.db')!r}"
        elif kind == "postgres":
            self.args = f"{servers().shared_postgres().dsn!r}, schema={servers().unique_name('up')!r}"
        else:
            self.args = f"{servers().shared_redis().url!r}, prefix={servers().unique_name('up') + ':'!r}"
        self.cls = {"file": "FileStore", "sqlite": "SQLiteStore", "postgres": "PostgresStore"}.get(
            kind, "RedisStore"
        )

    def code(self, sealed: bool) -> str:
        """Python that opens the store as ``store`` (with the test's key when ``sealed``)."""
        ring = f"Keyring({{'k1': {KEY!r}}}, current='k1')" if sealed else "None"
        return (
            "from statekeep import Keyring\n"
            f"from statekeep.stores import {self.cls}\n"
            f"store = {self.cls}({self.args}, encrypt={ring})\n"
        )

    def open(self, sealed: bool) -> Store:
        scope: dict[str, object] = {}
        exec(self.code(sealed), scope)  # the same code, run by this statekeep
        store = scope["store"]
        assert isinstance(store, Store)
        return store


@pytest.fixture(params=KINDS)
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    yield Place(request.param, tmp_path)


def older(place: Place, sealed: bool, body: str) -> list[str]:
    """Run ``body`` under the last release's statekeep with ``store`` open; its output lines."""
    done = run_older(place.code(sealed) + body)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


TRY = """
def attempt(what, op):
    try:
        op()
        print(what, "ok")
    except Exception as exc:
        print(what, type(exc).__name__, str(exc).replace("\\n", " "))
"""


@pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
def test_an_older_statekeep_refuses_a_state_made_with_an_incarnation(place: Place, sealed: bool) -> None:
    with place.open(sealed) as store:
        state = sk.State("made by this statekeep", id="job")
        state.add_user("hello")
        store.save(state)
    lines = older(
        place,
        sealed,
        TRY
        + """
attempt("load", lambda: store.load("job"))
entry = {"seq": 2, "kind": "user", "at": "2026-01-01T00:00:00+00:00", "text": "older"}
attempt("append", lambda: store.write("job", [entry], None))
""",
    )
    assert [line.split()[:2] for line in lines] == [
        ["load", "UnsupportedFormatError"],
        ["append", "UnsupportedFormatError"],
    ], lines
    with place.open(sealed) as store:  # nothing was written: this statekeep reads it whole
        again = store.load("job")
        assert [e["kind"] for e in again.history] == ["task", "user"]
        assert again.incarnation == state.incarnation


@pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
def test_a_state_an_older_statekeep_made_keeps_working(place: Place, sealed: bool) -> None:
    older(
        place,
        sealed,
        """
import statekeep as sk
state = sk.State("made by the older statekeep", id="old")
state.add_user("from before")
store.save(state)
""",
    )
    with place.open(sealed) as store:
        state = store.load("old")
        assert state.incarnation is None  # made before incarnations: its records bind none
        state.add_user("from this statekeep")
        store.save(state)
        assert [e.get("text") for e in store.load("old").history][1:] == [
            "from before",
            "from this statekeep",
        ]
    # Once this statekeep wrote to it, the older one refuses it (the store, or the State's log).
    lines = older(place, sealed, TRY + 'attempt("load", lambda: store.load("old"))')
    assert [line.split()[:2] for line in lines] == [["load", "UnsupportedFormatError"]], lines


def test_records_of_a_state_made_before_open_only_there(tmp_path: Path) -> None:
    """A record sealed without an incarnation (by the older statekeep) does not open in a
    State that has one: spliced into a new State of the same id, it fails."""
    from statekeep import DecryptionError
    from tests.support.stores import plant_entry, stored_record

    place = Place("sqlite", tmp_path)
    older(
        place,
        True,
        """
import statekeep as sk
state = sk.State("old", id="job")
state.add_user("old line")
store.save(state)
""",
    )
    with place.open(True) as store:
        old_line = stored_record(store, "job").entries[1]
        store.delete("job")
        state = sk.State("new", id="job")
        state.add_user("new line")
        store.save(state)
        import asyncio

        import orjson

        asyncio.run(plant_entry(store, "job", 1, orjson.dumps(old_line)))
        with pytest.raises(DecryptionError, match="entry seq 1"):
            store.load("job")
    assert Keyring  # the ring the code builds


def test_an_export_file_of_the_older_statekeep_imports_and_the_older_refuses_a_new_one(
    tmp_path: Path,
) -> None:
    from statekeep._transfer.exporting import aexport, aimport

    old_file, new_file = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    place = Place("file", tmp_path)
    older(
        place,
        False,
        f"""
import asyncio
import statekeep as sk
from statekeep._exporting import aexport
state = sk.State("exported by the older statekeep", id="old")
store.save(state)
asyncio.run(aexport(store, {str(old_file)!r}))
""",
    )
    import asyncio

    import orjson

    assert orjson.loads(old_file.read_bytes().splitlines()[0])["version"] == 1
    target = sk.MemoryStore()
    asyncio.run(aimport(target, old_file))  # the old format is still read
    kept = target.load("old")
    assert kept.task == "exported by the older statekeep" and kept.incarnation is not None
    asyncio.run(aexport(target, new_file))
    lines = older(
        place,
        False,
        TRY
        + f"from statekeep._exporting import verify\nattempt('verify', lambda: verify(open({str(new_file)!r}, 'rb')))",
    )
    assert [line.split()[:2] for line in lines] == [["verify", "UnsupportedFormatError"]], lines
