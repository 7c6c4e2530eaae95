"""Where a PostgresStore's server is, from its DSN, its keyword arguments and the ``PG*``
environment variables (as libpq reads them)."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlsplit

from ..._core import passwords as redaction
from .._urlquery import check_names, take_ours


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its user information and every password replaced by ``***`` (see
    :mod:`statekeep._core.passwords`)."""
    return redaction.redact_url(dsn)


class Where:
    """Where the server is, for equality, ``repr`` and error messages; never the password."""

    def __init__(self, dsn: str | None, kwargs: dict[str, Any]) -> None:
        host: str | None = None
        port: object = None
        database: str | None = None
        user: str | None = None
        if dsn:
            # The user information first: a password may hold '/', '?', '#' or '@'.
            userinfo, rest = redaction.split_userinfo(dsn)
            if userinfo:
                user = unquote(userinfo.partition(":")[0]) or None
            parts = urlsplit(rest)
            host, port = _split_hosts(parts.netloc)
            database = unquote(parts.path.lstrip("/")) or None
            for key, value in _query_pairs(parts.query):
                if key == "host":
                    host = value
                elif key == "port":
                    port = value
                elif key in ("dbname", "database"):
                    database = value
                elif key == "user":
                    user = value
        host = kwargs.get("host", host) or os.environ.get("PGHOST") or "localhost"
        port = kwargs.get("port", port) or os.environ.get("PGPORT") or 5432
        user = kwargs.get("user", user) or os.environ.get("PGUSER")
        database = kwargs.get("database", database) or os.environ.get("PGDATABASE") or user
        self.host = str(host)
        self.port = str(port)
        self.database: str | None = database
        self.user: str | None = user


def _split_hosts(hostlist: str) -> tuple[str | None, str | None]:
    """(host, port) of a URI's host part (a list of hosts is kept whole, without a port)."""
    if not hostlist:
        return None, None
    if "," in hostlist:  # several hosts: keep the list as it is
        return hostlist, None
    if hostlist.startswith("["):
        host, _, rest = hostlist[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else None
    host, colon, port = hostlist.rpartition(":")
    return (unquote(host), port) if colon else (unquote(hostlist), None)


def _query_pairs(query: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for item in query.split("&"):
        key, eq, value = item.partition("=")
        if eq:
            pairs.append((unquote(key).lower(), unquote(value)))
    return pairs


def take_options(dsn: str) -> tuple[str, dict[str, str]]:
    """``dsn`` without the store's own query options (``namespace``, ``retention``: asyncpg
    would send them to the server as settings), and those options. Any other parameter
    goes to asyncpg, which sends those it does not know to the server as settings; one
    that looks like a misspelling of the store's own is a ValueError naming it."""
    head, taken, others = take_ours(dsn)
    check_names(
        dsn,
        others,
        "postgresql:// URL",
        theirs=lambda name: True,
        hint="any other goes to PostgreSQL as a setting",
    )
    return head, taken


def seconds(text: str) -> float:
    """The ``retention`` of a DSN's query, in seconds; ValueError if it is not a number."""
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"retention in the DSN is a number of seconds, got {text!r}") from None
