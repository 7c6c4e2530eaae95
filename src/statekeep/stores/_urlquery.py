"""The query parameters of a store URL: statekeep's own (``namespace``, ``retention``, ``offload``),
taken out for the store, and a refusal naming a parameter nobody takes, so that a typo
never sends data to another place (a file named ``t.db?namepsace=a``, the default
namespace)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

from .._core.labels import validate_namespace
from .._core.passwords import redact_url, split_userinfo

#: The query parameters every store URL takes, for the store itself (not its driver).
LOCAL = ("namespace", "retention", "offload")
#: Those, and the ones only a server store takes (how long to resend after a lost connection).
OURS = (*LOCAL, "failover_timeout")

#: How to name a file or folder whose name holds a '?', in the messages that refuse one.
QUESTION_MARK = (
    "a '?' in a folder's or file's own name is written %3F in a file:// or sqlite:// URL "
    "(file:///abs/odd%3Fname)"
)


def query_of(url: str) -> tuple[str, str | None]:
    """``(url up to its '?', its query)``; the query is None when there is no '?'. A
    password may hold a '?': the user information is passed over first."""
    _, rest = split_userinfo(url)
    start = rest.find("?")
    if start < 0:
        return url, None
    query = rest[start + 1 :]
    return url[: len(url) - len(query) - 1], query


def take_ours(url: str) -> tuple[str, dict[str, str], list[str]]:
    """``url`` without statekeep's own parameters, those (decoded), and the names of the
    others, in order; ValueError for one of ours given twice. The others stay as written
    (a driver reads them), a ``#fragment`` too."""
    head, query = query_of(url)
    if query is None:
        return url, {}, []
    query, hash_mark, fragment = query.partition("#")
    kept: list[str] = []
    taken: dict[str, str] = {}
    for item in query.split("&"):
        if not item:
            continue
        key = unquote(item.partition("=")[0])
        if key in OURS:
            if key in taken:
                raise ValueError(f"the store URL gives {key} twice; give it once")
            taken[key] = unquote(item.partition("=")[2])
        else:
            kept.append(item)
    names = [unquote(item.partition("=")[0]) for item in kept]
    if not taken:
        return url, {}, names  # as written, to the last character
    rest = ("?" + "&".join(kept) if kept else "") + hash_mark + fragment
    return head + rest, taken, names


def check_names(
    url: str,
    names: Iterable[str],
    kind: str,
    *,
    theirs: Callable[[str], bool] = lambda name: False,
    shown: Iterable[str] = (),
    hint: str = "",
    ours: tuple[str, ...] = OURS,
) -> None:
    """Refuse (ValueError) the first of ``names`` (a URL's parameters other than ours) that
    ``theirs`` (the driver's) does not take, or that looks like a misspelling of ours.
    The message names it, what a ``kind`` URL takes (``ours``: those of ours it takes,
    then ``shown``: the driver's, or the most used of them) and ``hint``."""
    for name in names:
        near = difflib.get_close_matches(name, OURS, n=1, cutoff=0.75)
        if theirs(name) and not near:
            continue
        guess = f" (did you mean {near[0]}?)" if near else ""
        taken = ", ".join(ours[:-1]) + " and " + ours[-1]
        more = ", ".join(shown)
        takes = f"{taken}; its driver's: {more}" if more else taken
        end = f"; {hint}" if hint else ""
        raise ValueError(
            f"unknown parameter {name!r} in the store URL {redact_url(url)!r}{guess}; "
            f"a {kind} takes {takes}{end}"
        )


def refuse_server_only(url: str, taken: dict[str, str], kind: str) -> None:
    """Refuse (ValueError) a parameter only server stores take in a local store's URL."""
    for key in taken:
        if key not in LOCAL:
            raise ValueError(
                f"{key} in the store URL {redact_url(url)!r} is for server stores (postgresql://, "
                f"redis://), which send a write again after a lost connection; a {kind} does not "
                f"take it: remove it"
            )


def our_values(taken: dict[str, str]) -> dict[str, Any]:
    """Statekeep's own parameters as constructor options: ``namespace`` checked,
    ``retention`` (seconds) as a timedelta, ``offload`` (bytes, or ``none``) as an int or
    None, ``failover_timeout`` (seconds >= 0) as a float; ValueError naming a bad one."""
    return {key: _value(key, raw) for key, raw in taken.items()}


def _value(key: str, raw: str) -> Any:
    if key == "failover_timeout":
        return check_timeout(raw, "failover_timeout in a store URL")
    if key == "namespace":
        return validate_namespace(raw)
    if key == "offload":
        if raw.lower() in ("none", "off"):
            return None
        if not raw.isdigit():
            raise ValueError(
                f"offload in a store URL is a size in bytes (e.g. offload=32768), or none to keep "
                f"every value inline; got {raw!r}"
            )
        return int(raw)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < 10**10:  # also refuses NaN and inf
        raise ValueError(f"retention in a store URL is a number of seconds > 0, got {raw!r}")
    return timedelta(seconds=seconds)


def check_timeout(value: object, where: str = "failover_timeout") -> float:
    """``value`` (seconds, or a numeric string from a URL) as a float >= 0, else a ValueError
    (TypeError for another type) naming ``where`` and what to give."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(
                f"{where} is a number of seconds >= 0 (e.g. failover_timeout=30; 0 raises at once "
                f"when the connection is lost), got {value!r}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{where} must be a number of seconds >= 0, got {type(value).__name__}")
    seconds = float(value)
    if not (math.isfinite(seconds) and 0 <= seconds < 10**6):
        raise ValueError(f"{where} is a number of seconds >= 0 (under 10**6), got {value!r}")
    return seconds
