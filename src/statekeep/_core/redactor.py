"""Redaction before persistence: secrets masked in what a store keeps (pure, no I/O)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .jsontext import Pairs, looks_like_object, read_object, write

#: Names whose values are masked whole by default, at any depth. Matched without regard to
#: case, ``-`` or ``_`` (``apiKey``, ``API-KEY`` and ``api_key`` are one name), and exactly:
#: ``max_tokens`` is not ``token``.
DEFAULT_KEYS: frozenset[str] = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "api_key",
        "x_api_key",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth_token",
        "bearer",
        "secret",
        "client_secret",
        "secret_key",
        "private_key",
        "authorization",
        "proxy_authorization",
        "cookie",
        "set_cookie",
        "session_token",
        "credentials",
    }
)

#: Snapshot keys a listing reads, never rewritten (secrets do not belong in them).
INDEX_KEYS = frozenset(
    {
        "v",
        "seq",
        "task",
        "created_at",
        "updated_at",
        "turn",
        "stopped_by",
        "finished",
        "agent",
        "parent",
        "labels",
        "expires_at",
        "expiry",
        "forked_from",
    }
)
#: Snapshot keys never rewritten: the listing's, and the idempotency-key origins of the
#: calls a fork inherited (ids and incarnations; masked, the fork's keys would change).
KEPT_KEYS = INDEX_KEYS | {"key_origins"}
#: An agent memory key's snapshot keys never rewritten besides :data:`KEPT_KEYS`: ``about``,
#: where an adapter keeps its own names for the key (LangGraph's namespace and key, already
#: spelled in the key itself) and the value's embeddings; ``Memory``'s API never writes it.
MEMORY_KEPT_KEYS = KEPT_KEYS | {"about"}
#: An entry's own keys, never rewritten: its place and kind in the history.
ENTRY_KEYS = frozenset({"seq", "kind", "at"})


def _norm(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def _is_pair(item: object) -> bool:
    """A name/value pair of a list of them (a header list): ``[name, value]`` or a tuple."""
    return isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)


class Redactor:
    """Masks secrets in every entry and snapshot before a store keeps them.

    Pass it to any built-in store as ``redact=``. What the store keeps is masked; the State
    in memory is not. It is deterministic, so sending a saved batch again is still skipped
    as identical.

    - ``keys``: the value of a dict key with one of these names is replaced whole by
      ``mask``, at any depth (default :data:`DEFAULT_KEYS`; pass ``DEFAULT_KEYS | {"ssn"}``
      to add to it). Names match without regard to case, ``-`` and ``_``. The same holds
      for a ``data`` entry's key, an agent memory key, a list of name/value pairs and
      a string holding a JSON object (see :meth:`value`).
    - ``values``: literal secrets, masked inside any string (longest first, so a secret
      that contains another is masked whole).
    - ``patterns``: regular expressions (compiled or str); every match inside a string is
      masked, e.g. ``re.compile(r"sk-[A-Za-z0-9]{20,}")`` for provider keys.

    Never rewritten: State ids, an entry's ``seq``, ``kind`` and ``at``, and the snapshot's
    listing fields (``task``, ``labels``, ``agent``, times, ...): keep secrets out of those.
    Dict keys are not searched for ``values`` or ``patterns``, only their values.
    Its repr shows counts, never a secret.
    """

    def __init__(
        self,
        *,
        keys: Iterable[str] = DEFAULT_KEYS,
        values: Iterable[str] = (),
        patterns: Iterable[re.Pattern[str] | str] = (),
        mask: str = "[REDACTED]",
    ) -> None:
        if isinstance(keys, str) or isinstance(values, str) or isinstance(patterns, (str, re.Pattern)):
            raise TypeError("keys, values and patterns each take a list (or set) of them, not one str")
        names = list(keys)
        secrets = list(values)
        if not all(isinstance(k, str) and k for k in names):
            raise TypeError("keys must be non-empty str names")
        if not all(isinstance(v, str) and v for v in secrets):
            raise TypeError("values must be non-empty str secrets")
        self._keys = frozenset(_norm(k) for k in names)
        self._value_count = len(set(secrets))
        compiled = [re.compile(p) if isinstance(p, str) else p for p in patterns]
        if not all(isinstance(p, re.Pattern) and isinstance(p.pattern, str) for p in compiled):
            raise TypeError("patterns must be str regular expressions or re.compile() of a str")
        # Each secret and pattern is searched on its own (a pattern's flags, groups and
        # backreferences intact, overlapping secrets both found); every match is masked,
        # overlapping ones as one span.
        literals = [re.compile(re.escape(v)) for v in sorted(set(secrets), key=len, reverse=True)]
        self._searches = literals + compiled
        self._pattern_count = len(compiled)
        if not isinstance(mask, str) or not mask:
            raise ValueError("mask must be a non-empty str")
        self._mask_search = re.compile(re.escape(mask))
        self.mask = mask

    def __repr__(self) -> str:
        return (
            f"Redactor(keys={len(self._keys)} names, values={self._value_count} secrets, "
            f"patterns={self._pattern_count}, mask={self.mask!r})"
        )

    def text(self, value: str) -> str:
        """``value`` with every secret and pattern match masked.

        Idempotent: a mask already in the text is kept as it is (a match overlapping it
        joins it), so masking what a store gives back changes nothing.
        """
        spans = [m.span() for search in self._searches for m in search.finditer(value) if m.end() > m.start()]
        if not spans:
            return value
        spans += [m.span() for m in self._mask_search.finditer(value)]
        spans.sort()
        out: list[str] = []
        at, mask = 0, self.mask
        start, end = spans[0]
        for s_, e_ in spans[1:]:
            if s_ < end:  # overlapping: one span
                end = max(end, e_)
                continue
            out += (value[at:start], mask)
            at, (start, end) = end, (s_, e_)
        out += (value[at:start], mask, value[end:])
        return "".join(out)

    def value(self, value: Any) -> Any:
        """A JSON value with secrets masked (a new value; ``value`` is not changed).

        Besides a dict's keys, two shapes name their values: a list of name/value pairs
        (``[["Authorization", "Bearer x"]]``, as HTTP headers are kept) and a string holding
        a JSON object (``'{"password": "x"}'``, as a tool call's ``arguments`` are). In
        both, the value of a masked name is masked whole; the JSON text is written back
        only if something in it was masked (still JSON text, of the same shape).
        """
        if isinstance(value, str):
            return self._json_text(value) if looks_like_object(value) else self.text(value)
        if isinstance(value, dict):
            keys = self._keys
            return {k: self.mask if _norm(k) in keys else self.value(v) for k, v in value.items()}
        if isinstance(value, Pairs):  # an object inside JSON text
            keys = self._keys
            return Pairs((k, self.mask if _norm(k) in keys else self.value(v)) for k, v in value)
        if isinstance(value, (list, tuple)):
            if value and all(_is_pair(v) for v in value):
                keys = self._keys
                return [[self.value(n), self.mask if _norm(n) in keys else self.value(v)] for n, v in value]
            return [self.value(v) for v in value]
        return value

    def _json_text(self, text: str) -> str:
        parsed = read_object(text)
        if parsed is None:  # looks like an object, is not one: a plain string
            return self.text(text)
        masked = self.value(parsed)
        # Keys are names, kept as written; but a literal secret or pattern anywhere in the
        # text (a key included) is masked, as in any other string.
        return self.text(text if masked == parsed else write(masked))

    def entry(self, entry: dict[str, Any]) -> dict[str, Any]:
        """An entry masked, its own keys (:data:`ENTRY_KEYS`) kept as they are. A ``data``
        entry whose ``key`` is a masked name has its ``value`` masked whole, as a dict
        key of that name would."""
        keys = self._keys
        masked = {
            k: v if k in ENTRY_KEYS else self.mask if _norm(k) in keys else self.value(v)
            for k, v in entry.items()
        }
        name = entry.get("key")
        if (
            entry.get("kind") == "data"
            and isinstance(name, str)
            and _norm(name) in keys
            and "value" in masked
        ):
            masked["value"] = self.mask
        return masked

    def snapshot(self, snapshot: dict[str, Any], *, memory: bool = False) -> dict[str, Any]:
        """A snapshot masked, its listing fields and key origins (:data:`KEPT_KEYS`) kept as they are.

        ``memory``: the snapshot of an agent memory key (``store.memory(scope)``), whose
        ``task`` is the key and ``value`` its value: a key with a masked name has its
        ``value`` masked whole, as a ``data`` entry's is, and its ``about``
        (:data:`MEMORY_KEPT_KEYS`) is kept as it is."""
        keys = self._keys
        kept = MEMORY_KEPT_KEYS if memory else KEPT_KEYS
        masked = {
            k: v if k in kept else self.mask if _norm(k) in keys else self.value(v)
            for k, v in snapshot.items()
        }
        name = snapshot.get("task")
        if memory and isinstance(name, str) and _norm(name) in keys and "value" in masked:
            masked["value"] = self.mask
        return masked
