"""A store URL's query parameters: ``?`` is parsed one way on a folder path, a file:// URL
and a sqlite:// URL; a parameter nobody takes is refused (bad usage, exit status 2) naming
it and the ones that are taken, before anything is created; a ``?`` in a folder's or
file's name is written %3F."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from statekeep import FileStore, SQLiteStore, State, open_store
from statekeep.cli import main
from tests.support import servers


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def typo_url(kind: str, tmp_path: Path) -> str:
    return {
        "folder": f"{tmp_path}/runs?namepsace=a",
        "relative-folder": "runs?namepsace=a",
        "file-url": f"file://{tmp_path}/runs?nmespace=a",
        "sqlite": "sqlite:///t.db?namepsace=a",
        "sqlite-abs": f"sqlite:///{tmp_path}/t.db?namepsace=a".replace(":///", ":////", 1),
        "memory": "memory://?namepsace=a",
        "postgres": f"{servers.shared_postgres().dsn}?namepsace=a",
        "redis": f"{servers.shared_redis().url}?namepsace=a",
    }[kind]


KINDS = ["folder", "relative-folder", "file-url", "sqlite", "sqlite-abs", "memory", "postgres", "redis"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_misspelt_parameter_is_refused_before_anything_is_made(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = typo_url(kind, tmp_path)
    typo = url.rpartition("?")[2].partition("=")[0]
    with pytest.raises(ValueError, match=f"unknown parameter '{typo}'") as info:
        open_store(url).save(State("lost in the wrong place", id="x"))
    assert "namespace" in str(info.value) and "retention" in str(info.value)
    assert os.listdir(tmp_path) == []  # no t.db?namepsace=a, no runs?..., no runs
    code, out, err = cli("list", "--store", url)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert f"'{typo}'" in err and "namespace" in err, err
    assert servers.PG_PASSWORD not in err


@pytest.mark.parametrize("kind", ["folder", "file-url", "sqlite", "memory"])
def test_a_local_store_takes_no_other_parameter(kind: str, tmp_path: Path) -> None:
    url = {
        "folder": f"{tmp_path}/runs?mode=ro",
        "file-url": f"file://{tmp_path}/runs?mode=ro",
        "sqlite": f"sqlite:///{tmp_path}/t.db?mode=ro".replace(":///", ":////", 1),
        "memory": "memory://?mode=ro",
    }[kind]
    with pytest.raises(ValueError, match=r"unknown parameter 'mode'.*namespace, retention and offload"):
        open_store(url)
    assert os.listdir(tmp_path) == []


def test_redis_refuses_what_neither_statekeep_nor_redis_py_takes() -> None:
    from statekeep.stores import RedisStore

    url = servers.shared_redis().url
    for bad in (f"{url}?bogus=1", f"{url}?socket_timeout=5&bogus=1"):
        with pytest.raises(ValueError, match=r"unknown parameter 'bogus'.*namespace.*socket_timeout"):
            open_store(bad)
        with pytest.raises(ValueError, match="unknown parameter 'bogus'"):
            RedisStore(bad)
        code, _, err = cli("list", "--store", bad)
        assert code == 2 and "'bogus'" in err, err
    with open_store(f"{url}?socket_timeout=5&client_name=me&namespace=params") as store:
        store.save(State("redis-py's own parameters still work", id="kept"))
        assert store.load("kept").task.startswith("redis-py")
        store.delete("kept")


def test_postgres_passes_settings_to_the_server_but_not_a_misspelt_own_one() -> None:
    url = servers.shared_postgres().dsn
    with pytest.raises(ValueError, match=r"'retension'.*did you mean retention"):
        open_store(f"{url}?retension=60")
    with open_store(f"{url}?application_name=statekeep-test&namespace=params") as store:
        store.save(State("a server setting still works", id="kept"))
        assert store.load("kept").task.startswith("a server setting")
        store.delete("kept")


def test_a_folder_with_a_question_mark_in_its_name_is_opened_percent_encoded(tmp_path: Path) -> None:
    odd = tmp_path / "odd?name=1"
    with FileStore(odd) as store:
        store.save(State("in an odd folder", id="odd"))
    url = f"file://{tmp_path}/odd%3Fname=1"
    with open_store(url) as store:
        assert store == FileStore(odd) and store.load("odd").task == "in an odd folder"
    code, out, _ = cli("list", "--store", url)
    assert code == 0 and "odd" in out
    with pytest.raises(ValueError, match=r"%3F"):  # the plain path reads ?name=1 as a parameter
        open_store(str(odd))
    assert (code := cli("list", "--store", str(odd))[0]) == 2, code


def test_a_sqlite_file_with_a_question_mark_in_its_name_is_opened_percent_encoded(tmp_path: Path) -> None:
    odd = tmp_path / "odd?.db"
    with SQLiteStore(odd) as store:
        store.save(State("in an odd file", id="odd"))
    url = f"sqlite:///{tmp_path}/odd%3F.db".replace(":///", ":////", 1)
    with open_store(url) as store:
        assert store == SQLiteStore(odd) and store.load("odd").task == "in an odd file"
    code, out, _ = cli("show", "odd", "--store", url)
    assert code == 0 and "in an odd file" in out
