"""open_store(url): one string names any store, for configuration files and the CLI."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .._core.passwords import redact_url
from .._store.contract import Store
from ._file import FileStore
from ._memory import MemoryStore
from ._urlquery import LOCAL, QUESTION_MARK, check_names, our_values, query_of, refuse_server_only, take_ours

_EXTRAS = {"_postgres": "postgres", "_redis": "redis"}


def open_store(url: str | Path, *, create: bool = True, **options: Any) -> Store:
    """Open the store a URL names.

    - ``path/to/dir`` or ``file:///abs/dir``: :class:`FileStore`
    - ``memory://``: a new :class:`MemoryStore`
    - ``sqlite:///relative.db``, ``sqlite:////absolute/path.db`` (as SQLAlchemy spells them)
    - ``postgresql://user:pass@host/db`` (extra ``statekeep[postgres]``)
    - ``redis://host:6379/0`` (extra ``statekeep[redis]``); a Redis Cluster:
      ``redis+cluster://host:6379,host:6379/0`` or ``?cluster=true`` (Redis URLs also take
      ``wait_replicas``, ``wait_timeout`` and ``failover_timeout``: see RedisStore)

    Every kind takes ``?namespace=NAME``, ``?retention=SECONDS`` and ``?offload=BYTES``
    (or ``offload=none``) (e.g. ``sqlite:///runs.db?namespace=team-a&retention=3600``),
    passed to the store as ``namespace=``, ``retention=`` (a timedelta) and ``offload=``
    (an int, or None: see the docs' "Large values" page). PostgreSQL and Redis URLs also
    take ``?failover_timeout=SECONDS``: how long a write keeps resending after a lost
    connection (a local store's URL refuses it). A ``?`` starts the parameters on every
    kind, a folder path too; a folder's or file's name holding a ``?`` is written ``%3F``
    in a ``file://`` or ``sqlite://`` URL (``file:///abs/odd%3Fname``). Other parameters go
    to a server's driver (PostgreSQL takes any as a server setting; Redis takes
    redis-py's); a parameter no one takes, or a misspelt ``namespace`` or ``retention``, is
    a ValueError naming it and those taken.

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
    head, taken, others = take_ours(text)
    if "://" not in text or urlsplit(head).scheme.lower() in ("file", "memory", "sqlite"):
        kind = "folder path" if "://" not in text else f"{urlsplit(head).scheme.lower()}:// URL"
        refuse_server_only(text, taken, kind)
    for key, value in our_values(taken).items():
        if key in options:
            raise ValueError(f"{key} is given twice: in the store URL and as an argument; give it once")
        options[key] = value
    if "://" not in text:
        _local_query(text, others, "folder path")
        return _file_store(head, text, **options)
    parts = urlsplit(head)
    scheme = parts.scheme.lower()
    if scheme == "file":
        _local_query(text, others, "file:// URL")
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URLs name a local folder (file:///path), got host {parts.netloc!r}")
        if parts.fragment:
            raise ValueError(f"a '#' in a file:// URL's folder name is written %23, in {text!r}")
        return _file_store(unquote(parts.path), text, **options)
    if scheme == "memory":
        _local_query(text, others, "memory:// URL", hint="")
        return MemoryStore(**options)
    if scheme == "sqlite":
        _local_query(text, others, "sqlite:// URL")
        # sqlite:///relative.db -> "relative.db"; sqlite:////abs.db -> "/abs.db"
        path = unquote(head.split("://", 1)[1])
        if not path.startswith("/") or path == "/":
            raise ValueError(
                f"a SQLite URL is sqlite:///relative.db or sqlite:////absolute.db, got {redact_url(text)!r}"
            )
        return _load("_sqlite", "SQLiteStore")(path[1:], create=create, **options)
    # A server store checks the rest of its URL's parameters (its driver's) itself.
    if scheme in ("postgres", "postgresql"):
        return _load("_postgres", "PostgresStore")(head, create=create, **options)
    if scheme in ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"):
        return _load("_redis", "RedisStore")(head, create=create, **options)
    raise ValueError(
        f"unknown store URL scheme {parts.scheme!r} in {redact_url(text)!r}; use a folder path, file://, "
        "memory://, sqlite:///, postgresql:// or redis://"
    )


def split_lifecycle(url: str) -> tuple[str, dict[str, Any]]:
    """``url`` without its ``namespace``, ``retention`` and ``offload`` query parameters, and those as
    constructor options; ValueError naming a bad or repeated one. Other parameters stay,
    as written."""
    head, taken, _ = take_ours(url)
    return head, our_values(taken)


def _local_query(url: str, others: list[str], kind: str, *, hint: str = QUESTION_MARK) -> None:
    """Refuse a parameter a local store does not take (all but ours), and a '?' followed
    by nothing: a '?' always starts the parameters, so a name holding one is written %3F."""
    check_names(url, others, kind, hint=hint, ours=LOCAL)
    if query_of(url)[1] == "":
        raise ValueError(f"nothing follows the '?' in the store URL {redact_url(url)!r}; {QUESTION_MARK}")


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
