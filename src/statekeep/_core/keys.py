"""Idempotency keys: one stable key per tool call or durable step (pure: no I/O).

A key is the same for the same call of the same life of a State, in every process and
after any crash, and differs between calls, States, and lives of one id (a State deleted
and created again gets a new incarnation, so its calls get new keys). Tools pass it to the
services they call (a payment API's ``Idempotency-Key``, a unique column of their own), so
that a call run again after a crash is recognised there as the same one.
"""

from __future__ import annotations

import hashlib

import orjson

#: The prefix of every key (and the version of how keys are made: a new scheme changes it).
PREFIX = "sk1_"


def idempotency_key(state_id: str, incarnation: str | None, call_id: str) -> str:
    """The idempotency key of tool call (or durable step) ``call_id`` of the State
    ``state_id`` in its life ``incarnation`` (``state.incarnation``; None for a store that
    keeps none): ``"sk1_"`` and 32 hex digits, safe in headers, URLs and SQL columns.

    The adapters' tools use it too: LangGraph's with the thread id, OpenAI Agents' with the
    session id, in place of ``state_id``."""
    for name, value in (("state_id", state_id), ("call_id", call_id)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"idempotency_key(): {name} must be a non-empty str, got {value!r}")
    if incarnation is not None and not isinstance(incarnation, str):
        raise TypeError(f"idempotency_key(): incarnation must be a str or None, got {incarnation!r}")
    # A JSON array: the parts (a thread id or call id may hold any character) cannot run
    # into each other.
    material = orjson.dumps(["statekeep-idempotency", state_id, incarnation, call_id])
    return PREFIX + hashlib.sha256(material).hexdigest()[:32]
