"""open_store(url): one string names any store, for configuration files and the CLI."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .filestore import FileStore
from .memory import MemoryStore
from .redaction import redact_url
from .store import Store

_EXTRAS = {"postgres": "postgres", "redis": "redis"}


def open_store(url: str | Path, **options: Any) -> Store:
    """Open the store a URL names.

    - ``path/to/dir`` or ``file:///abs/dir``: :class:`FileStore`
    - ``memory://``: a new :class:`MemoryStore`
    - ``sqlite:///relative.db``, ``sqlite:////absolute/path.db`` (as SQLAlchemy spells them)
    - ``postgresql://user:pass@host/db`` (extra ``statekeep[postgres]``)
    - ``redis://host:6379/0`` (extra ``statekeep[redis]``)

    ``options`` go to the store's constructor. An unknown scheme is a ValueError naming it;
    a missing extra is an ImportError saying which one to install.
    """
    text = str(url)
    if "://" not in text:
        return FileStore(text, **options)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URLs name a local folder (file:///path), got host {parts.netloc!r}")
        return FileStore(unquote(parts.path), **options)
    if scheme == "memory":
        return MemoryStore(**options)
    if scheme == "sqlite":
        # sqlite:///relative.db -> "relative.db"; sqlite:////abs.db -> "/abs.db"
        path = unquote(text.split("://", 1)[1])
        if not path.startswith("/") or path == "/":
            raise ValueError(f"a SQLite URL is sqlite:///relative.db or sqlite:////absolute.db, got {text!r}")
        return _load("sqlite", "SQLiteStore")(path[1:], **options)
    if scheme in ("postgres", "postgresql"):
        return _load("postgres", "PostgresStore")(text, **options)
    if scheme in ("redis", "rediss", "unix"):
        return _load("redisstore", "RedisStore")(text, **options)
    raise ValueError(
        f"unknown store URL scheme {parts.scheme!r} in {redact_url(text)!r}; use a folder path, file://, "
        "memory://, sqlite:///, postgresql:// or redis://"
    )


def _load(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(f"statekeep.{module}"), name)
    except ImportError as exc:
        extra = _EXTRAS.get(module)
        if extra is None:
            raise
        raise ImportError(f"{name} needs an extra: pip install 'statekeep[{extra}]' ({exc})") from exc
