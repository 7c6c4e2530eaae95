"""The kit's capability flags, named where a store lacks what its test class says it has:
a test that meets a store without a method (NotImplementedError) or a keyword (TypeError)
fails saying which flag to set, instead of with the bare error."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

from .._core.query import QUERY_KEYWORDS

#: What a NotImplementedError of statekeep's ``Store`` names, and the flag it is about.
_METHODS = (
    ("list()", "supports_list"),
    ("delete()", "supports_delete"),
    ("memory()", "supports_memory"),
    ("gc()", "supports_expiry"),
    ("leases", "supports_leases"),
    ("expect_next", "supports_expect_next"),
    ("namespaces", "supports_namespaces"),
)
#: A keyword a store may not take, and the flag it is about.
_KEYWORDS = {
    **dict.fromkeys(QUERY_KEYWORDS, "supports_query"),
    **dict.fromkeys(("retention", "clock", "ttl"), "supports_expiry"),
    **dict.fromkeys(("redact", "encrypt", "allow_plaintext"), "supports_protection"),
    "namespace": "supports_namespaces",
    "lease": "supports_leases",
    "expect_next": "supports_expect_next",
}
_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")


def name_the_flags(cls: type) -> None:
    """Wrap each test of ``cls`` so that a capability its store lacks fails naming the flag."""
    for name in dir(cls):
        test = getattr(cls, name)
        if (
            name.startswith("test_")
            and inspect.isfunction(test)
            and not getattr(test, "statekeep_flags", False)
        ):
            setattr(cls, name, _named(test))


def flag_for(exc: BaseException) -> str | None:
    """The flag a store's error is about, if it is one of a missing capability."""
    if isinstance(exc, NotImplementedError):
        return next((flag for what, flag in _METHODS if what in str(exc)), None)
    if isinstance(exc, TypeError):
        found = _UNEXPECTED.search(str(exc))
        return None if found is None else _KEYWORDS.get(found.group(1))
    return None


def _fail(self: Any, exc: BaseException) -> None:
    flag = flag_for(exc)
    if flag is None or not getattr(self, flag, True):
        return
    cls = type(self).__name__
    pytest.fail(
        f"{type(exc).__name__}: {exc}\nThe store lacks what {cls}.{flag} says it has: set "
        f"{flag} = False in {cls} (its tests are then skipped), or give the store what it lacks",
        pytrace=False,
    )


def _named(test: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(test):

        @functools.wraps(test)  # pytest reads the fixtures it takes from the test's signature
        async def run_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return await test(self, *args, **kwargs)
            except (NotImplementedError, TypeError) as exc:
                _fail(self, exc)
                raise

        run_async.statekeep_flags = True  # type: ignore[attr-defined]
        return run_async

    @functools.wraps(test)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return test(self, *args, **kwargs)
        except (NotImplementedError, TypeError) as exc:
            _fail(self, exc)
            raise

    run.statekeep_flags = True  # type: ignore[attr-defined]
    return run
