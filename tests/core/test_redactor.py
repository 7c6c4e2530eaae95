"""Redactor: what it masks, what it never touches, and that masking twice changes nothing."""

from __future__ import annotations

import json
import re
from collections import OrderedDict

import pytest

from statekeep import DEFAULT_KEYS, MemoryStore, Redactor, State


def test_keys_match_at_any_depth_without_case_dash_or_underscore() -> None:
    r = Redactor()
    masked = r.value({"outer": [{"API-Key": "a", "apiKey": "b", "max_tokens": 5, "Authorization": {"x": 1}}]})
    assert masked == {
        "outer": [
            {"API-Key": "[REDACTED]", "apiKey": "[REDACTED]", "max_tokens": 5, "Authorization": "[REDACTED]"}
        ]
    }


def test_a_data_entry_named_like_a_secret_is_masked_whole() -> None:
    entry = {"seq": 3, "kind": "data", "at": "t", "key": "api_key", "value": {"nested": "sk-live"}}
    assert Redactor().entry(entry)["value"] == "[REDACTED]"
    other = {**entry, "key": "color"}
    assert Redactor().entry(other)["value"] == {"nested": "sk-live"}


def test_values_longest_first_and_overlapping_matches_masked_whole() -> None:
    r = Redactor(values=["abc", "abcdef", "defxyz"], patterns=[r"sk-[A-Za-z0-9]+"])
    assert r.text("1 abcdef 2 abc 3 abcdefxyz 4") == "1 [REDACTED] 2 [REDACTED] 3 [REDACTED] 4"
    assert r.text("key sk-abcDEF123 end") == "key [REDACTED] end"


def test_patterns_keep_their_own_flags_and_groups() -> None:
    r = Redactor(patterns=[r"(?i)bearer\s+\S+", re.compile(r"(['\"]).{3,}?\1"), r"(?P<n>x)y(?P=n)"])
    assert r.text("BEARER tok 'hunter' xyx") == "[REDACTED] [REDACTED] [REDACTED]"


def test_masking_is_idempotent_even_when_a_pattern_matches_the_mask() -> None:
    r = Redactor(patterns=[r"\b[A-Z0-9]{8,}\b", r"\d*"], values=["RED"])
    once = r.text("code ABCDEFGH42 and RED")
    assert once == "code [REDACTED] and [REDACTED]"
    assert r.text(once) == once


def test_index_fields_and_entry_keys_are_never_rewritten() -> None:
    r = Redactor(values=["secret"])
    snap = {"task": "secret task", "labels": {"a": "secret"}, "notes": "secret", "token": "x"}
    assert r.snapshot(snap) == {
        "task": "secret task",
        "labels": {"a": "secret"},
        "notes": "[REDACTED]",
        "token": "[REDACTED]",
    }
    entry = {"seq": 1, "kind": "secret", "at": "secret", "text": "a secret"}
    assert r.entry(entry) == {"seq": 1, "kind": "secret", "at": "secret", "text": "a [REDACTED]"}


def test_subclasses_and_bad_values_behave_as_in_a_clear_store() -> None:
    store = MemoryStore(redact=Redactor(values=["pw1"]))
    clear = MemoryStore()
    entry = OrderedDict(seq=0, kind="note", password="pw1", text=OrderedDict(t="pw1"))
    store.write("a", [entry], None, create=True)
    assert store.read("a").entries == [
        {"seq": 0, "kind": "note", "password": "[REDACTED]", "text": {"t": "[REDACTED]"}}
    ]
    for bad in ({"seq": 0, 1: "x"}, {"seq": 0, "password": {1, 2}}):
        for s in (store, clear):
            with pytest.raises(TypeError):
                s.write("b", [bad], None, create=True)
    assert store.read("b") is None


def test_a_state_saved_again_and_after_a_load_has_no_conflict() -> None:
    store = MemoryStore(redact=Redactor(values=["pw1"], patterns=[r"\b[A-Z]{8,}\b"]))
    state = State("t", id="s")
    state.add_user("pw1 and REDACTEDX")
    store.save(state)
    store.save(state)
    loaded = store.load("s")
    store.write("s", loaded.history, None)  # what the store gave back, sent again
    loaded.add_user("more")
    store.save(loaded)
    assert [e.get("text") for e in store.read("s").entries[1:]] == ["[REDACTED] and [REDACTED]", "more"]


def test_bad_arguments_and_a_repr_without_secrets() -> None:
    with pytest.raises(TypeError, match="list"):
        Redactor(values="pw")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="non-empty"):
        Redactor(values=[""])
    with pytest.raises(ValueError, match="mask"):
        Redactor(mask="")
    r = Redactor(values=["hunter2"], patterns=[r"sk-\w+"], keys=DEFAULT_KEYS | {"ssn"})
    assert "hunter2" not in repr(r) and "sk-" not in repr(r)
    assert (
        repr(r)
        == f"Redactor(keys={len(DEFAULT_KEYS) + 1} names, values=1 secrets, patterns=1, mask='[REDACTED]')"
    )


def test_header_pairs_mask_the_value_of_a_secret_name() -> None:
    r = Redactor()
    headers = [("Authorization", "Bearer x"), ["Accept", "text/plain"], ("X-Api-Key", {"k": 1})]
    assert r.value({"headers": headers}) == {
        "headers": [["Authorization", "[REDACTED]"], ["Accept", "text/plain"], ["X-Api-Key", "[REDACTED]"]]
    }
    assert r.value(["password", "reset"]) == ["password", "reset"]  # two words, not a list of pairs
    assert r.value([["token", "t"], "loose"]) == [["token", "t"], "loose"]


def test_json_text_of_an_object_is_masked_and_stays_json_of_the_same_shape() -> None:
    r = Redactor(values=["hunter2"])
    args = (
        '{"city": "Oslo", "password": "x", "n": 1e400, "big": 123456789012345678901234567890, "s": "hunter2"}'
    )
    once = r.value(args)
    assert once == (
        '{"city": "Oslo", "password": "[REDACTED]", "n": 1e400, "big": 123456789012345678901234567890, '
        '"s": "[REDACTED]"}'
    )
    assert r.value(once) == once  # idempotent
    dup = '{"token": "a", "token": "b", "nested": "{\\"apiKey\\": \\"k\\"}"}'
    assert json.loads(r.value(dup)) == {"token": "[REDACTED]", "nested": '{"apiKey": "[REDACTED]"}'}
    assert r.value(dup).count('"token"') == 2  # every pair kept, each masked
    clean = '{ "city":"Oslo" }'
    assert r.value(clean) is clean  # nothing to mask: the text as it was


@pytest.mark.parametrize(
    "text", ['{"password": broken', '{"password": "x"', "[1, 2]", '"{}"', "{NaN}", '{"a": NaN}', "{}x"]
)
def test_a_string_that_is_not_a_json_object_is_plain_text(text: str) -> None:
    assert Redactor(values=["a"]).value(text) == Redactor(values=["a"]).text(text)
    assert Redactor().value(text) == text


def test_a_literal_secret_used_as_a_key_inside_json_text_is_masked_too() -> None:
    redactor = Redactor(values=["s3cr3t"], patterns=[r"sk-[a-z]+"])
    masked = redactor.value('{"s3cr3t": "x", "password": "sk-abc", "note": "sk-def"}')
    assert "s3cr3t" not in masked and "sk-" not in masked
    assert redactor.value(masked) == masked  # idempotent


def test_an_agent_memory_keys_about_is_kept_and_only_there() -> None:
    redactor = Redactor(patterns=[r"[a-z0-9]{24,}"])
    about = {"ns": ["users", "0f3a9c1b7d2e4f6a8b0c1d2e3f4a5b6c"], "vec": {"$": "b" * 32}}
    snapshot = {"task": "k", "value": {"note": "a" * 30}, "about": about}
    kept = redactor.snapshot(snapshot, memory=True)
    assert kept["about"] == about and kept["value"] == {"note": "[REDACTED]"}
    assert redactor.snapshot(snapshot)["about"]["ns"][1] == "[REDACTED]"  # a State's is judged
