"""Framework ids (thread ids, session ids: any string) as State ids (statekeep.adapters._ids)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statekeep import validate_id
from statekeep.adapters._ids import framework_id_for, state_id_for

ANY_ID = st.text(min_size=1, max_size=300)


@given(ANY_ID)
def test_every_framework_id_maps_to_a_valid_state_id(framework_id: str) -> None:
    assert validate_id(state_id_for(framework_id)) == state_id_for(framework_id)


@given(ANY_ID)
def test_a_mapping_is_reversed_or_hashed(framework_id: str) -> None:
    back = framework_id_for(state_id_for(framework_id))
    assert back == framework_id or (back is None and state_id_for(framework_id).startswith("_h"))


@given(ANY_ID, ANY_ID)
def test_two_framework_ids_never_share_a_state_id(one: str, other: str) -> None:
    if one != other:
        assert state_id_for(one) != state_id_for(other)


@pytest.mark.parametrize(
    ("framework_id", "state_id"),
    [
        ("user:42", "user_3a42"),
        ("team/a:b", "team_2fa_3ab"),
        ("plain-id-7", "plain-id-7"),
        ("Ann", "_41nn"),
        ("under_score", "under__score"),
        ("é", "_c3_a9"),
    ],
)
def test_readable_ids_stay_readable(framework_id: str, state_id: str) -> None:
    assert state_id_for(framework_id) == state_id
    assert framework_id_for(state_id) == framework_id


def test_a_hashed_id_never_meets_an_escaped_one() -> None:
    long = "x" * 200
    hashed = state_id_for(long)
    assert hashed.startswith("_h") and len(hashed) == 66
    assert state_id_for(hashed) != hashed  # an id that looks hashed is escaped like any other
    assert framework_id_for(state_id_for(hashed)) == hashed
    assert state_id_for("\ud800") != state_id_for("\ud801")  # lone surrogates: hashed, still apart


@given(ANY_ID, ANY_ID)
def test_ids_that_differ_only_in_case_differ_in_lowercase_too(one: str, other: str) -> None:
    # A FileStore on a case-insensitive file system holds one of two ids that differ in case only.
    if one != other:
        assert state_id_for(one).lower() != state_id_for(other).lower()


@pytest.mark.parametrize("bad", ["", 7, None])
def test_an_empty_or_non_str_id_is_refused(bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match="framework id"):
        state_id_for(bad)  # type: ignore[arg-type]


def test_ids_statekeep_never_makes_are_not_reversed() -> None:
    for state_id in ("_zz", "a_", "_3", "_h00", "_61", "Ann"):  # "_61" is "a" spelled long
        assert framework_id_for(state_id) is None
