"""open_store(url): one string names any store, for configuration files and the CLI."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ._labels import validate_namespace
from ._redaction import redact_url
from ._store import Store
from .stores._file import FileStore
from .stores._memory import MemoryStore

_EXTRAS = {"_postgres": "postgres", "_redis": "redis"}


def open_store(url: str | Path, *, create: bool = True, **options: Any) -> Store:
    """Open the store a URL names.

    - ``path/to/dir`` or ``file:///abs/dir``: :class:`FileStore`
    - ``memory://``: a new :class:`MemoryStore`
    - ``sqlite:///relative.db``, ``sqlite:////absolute/path.db`` (as SQLAlchemy spells them)
    - ``postgresql://user:pass@host/db`` (extra ``statekeep[postgres]``)
    - ``redis://host:6379/0`` (extra ``statekeep[redis]``)

    Every kind takes ``?namespace=NAME`` and ``?retention=SECONDS`` (e.g.
    ``sqlite:///runs.db?namespace=team-a&retention=3600``), passed to the store as
    ``namespace=`` and ``retention=`` (a timedelta); other query parameters of a server URL
    go to its driver as before.

    ``create=False`` opens an existing store only, changing nothing until a write or
    delete: SQLite, PostgreSQL and Redis stores then create no file, tables or keys and
    refuse a place that holds no statekeep store (NotAStoreError); a FileStore makes
    nothing before its first write anyway. Other ``options`` go to the store's constructor.
    An empty URL, an unknown scheme, or a path to a file where a FileStore folder is
    expected is a ValueError saying what to write instead; a missing extra is an
    ImportError saying which one to install.
    """
    text = str(url)
    if not text.strip():
        raise ValueError(
            "the store URL is empty; give a folder (a FileStore) or a URL such as sqlite:///runs.db"
        )
    text, lifecycle = split_lifecycle(text, bare="://" not in text)
    for key in lifecycle:
        if key in options:
            raise ValueError(f"{key} is given twice: in the store URL and as an argument; give it once")
    options.update(lifecycle)
    if "://" not in text:
        return _file_store(text, text, **options)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URLs name a local folder (file:///path), got host {parts.netloc!r}")
        return _file_store(unquote(parts.path), text, **options)
    if scheme == "memory":
        return MemoryStore(**options)
    if scheme == "sqlite":
        # sqlite:///relative.db -> "relative.db"; sqlite:////abs.db -> "/abs.db"
        path = unquote(text.split("://", 1)[1])
        if not path.startswith("/") or path == "/":
            raise ValueError(
                f"a SQLite URL is sqlite:///relative.db or sqlite:////absolute.db, got {redact_url(text)!r}"
            )
        return _load("_sqlite", "SQLiteStore")(path[1:], create=create, **options)
    if scheme in ("postgres", "postgresql"):
        return _load("_postgres", "PostgresStore")(text, create=create, **options)
    if scheme in ("redis", "rediss", "unix"):
        return _load("_redis", "RedisStore")(text, create=create, **options)
    raise ValueError(
        f"unknown store URL scheme {parts.scheme!r} in {redact_url(text)!r}; use a folder path, file://, "
        "memory://, sqlite:///, postgresql:// or redis://"
    )


#: The query parameters every store URL takes, for the store itself (not its driver).
LIFECYCLE = ("namespace", "retention")


def split_lifecycle(url: str, *, bare: bool = False) -> tuple[str, dict[str, Any]]:
    """``url`` without its ``namespace`` and ``retention`` query parameters, and those as
    constructor options; ValueError naming a bad or repeated one. Other parameters stay, as
    written. A bare folder path keeps a ``?`` that is not followed by these parameters only
    (a folder may have one in its name)."""
    head, mark, query = url.partition("?")
    if not mark:
        return url, {}
    kept: list[str] = []
    found: dict[str, Any] = {}
    for part in query.split("&"):
        key, _, raw = part.partition("=")
        if unquote(key) not in LIFECYCLE:
            kept.append(part)
            continue
        key = unquote(key)
        if key in found:
            raise ValueError(f"the store URL gives {key} twice")
        found[key] = _lifecycle_value(key, unquote(raw))
    if bare and kept:
        return url, {}  # a folder whose name holds a '?'
    return head + ("?" + "&".join(kept) if kept else ""), found


def _lifecycle_value(key: str, raw: str) -> Any:
    if key == "namespace":
        return validate_namespace(raw)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < 10**10:  # also refuses NaN and inf
        raise ValueError(f"retention in a store URL is a number of seconds > 0, got {raw!r}")
    return timedelta(seconds=seconds)


def _file_store(path: str, url: str, **options: Any) -> Store:
    """A FileStore in the folder ``path``; a path to a file is refused (a common slip:
    a SQLite file given without sqlite:///)."""
    if os.path.isfile(path):
        with open(path, "rb") as file:
            sqlite = file.read(16) == b"SQLite format 3\x00"
        hint = f"; for a SQLite database write sqlite:///{path}" if sqlite or _looks_sqlite(path) else ""
        raise ValueError(f"{url!r} is a file, not a FileStore folder{hint}")
    return FileStore(path, **options)


def _looks_sqlite(path: str) -> bool:
    """A name a SQLite database usually has."""
    return path.lower().endswith((".db", ".sqlite", ".sqlite3"))


def _load(module: str, name: str) -> Callable[..., Store]:
    """The store class ``name`` of ``statekeep.stores.<module>``; ImportError naming the
    extra to install when its driver is missing."""
    try:
        store: Callable[..., Store] = getattr(importlib.import_module(f"statekeep.stores.{module}"), name)
    except ImportError as exc:
        extra = _EXTRAS.get(module)
        if extra is None:
            raise
        raise ImportError(f"{name} needs an extra: pip install 'statekeep[{extra}]' ({exc})") from exc
    return store
