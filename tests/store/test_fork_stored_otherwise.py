"""A fork of a State whose stored lines are not what this store would write now: written before
offload (or with ``offload=None``), or trimmed (its base holds values inline). The stores that
copy a fork on their side compare the stored lines with the fork's; when they differ, the fork is
written whole from the entries it read, never refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeep import State, open_store
from tests.support.stores import store_url

BIG = "v" * 50_000  # over the default offload bound (32 KiB)


@pytest.mark.parametrize("kind", ["file", "sqlite", "postgres", "redis"])
def test_a_state_written_inline_forks_under_the_default_offload(tmp_path: Path, kind: str) -> None:
    url = store_url(kind, tmp_path, "inline")
    joiner = "&" if "?" in url else "?"
    state = State("written before offload", id="old")
    state.set_data("page", BIG)
    with open_store(url + joiner + "offload=none") as before:
        before.save(state)
    with open_store(url) as store:
        fork = store.fork("old", new_id="new")
        assert fork.data == {"page": BIG}
        assert store.load("new").data == {"page": BIG}
        assert store.load("old").history == state.history


@pytest.mark.parametrize("kind", ["file", "sqlite", "postgres", "redis"])
def test_a_trimmed_state_with_a_large_value_in_its_base_forks(tmp_path: Path, kind: str) -> None:
    with open_store(store_url(kind, tmp_path, "based")) as store:
        state = State("trimmed", id="t")
        state.set_data("page", BIG)
        state.add_user("more")
        state.compact("the page was read", through=2)
        state.add_user("after")
        store.save(state)
        store.trim("t", before=3)
        fork = store.fork("t", new_id="t2")
        assert fork.data == {"page": BIG}
        assert store.load("t2").data == {"page": BIG}
