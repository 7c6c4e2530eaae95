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
        #: Every server the DSN names, as ``host:port`` (libpq's multi-host form
        #: ``h1:p1,h2:p2``, or ``?host=h1,h2&port=p1,p2``), in the order they are tried.
        self.servers = _servers(self.host, str(port))

    @property
    def several(self) -> bool:
        """The DSN names more than one server (a primary and its standbys)."""
        return len(self.servers) > 1

    @property
    def address(self) -> str:
        """Where the server is, as messages name it: ``host:port``, or each of several."""
        return ",".join(self.servers)


def _servers(host: str, port: str) -> list[str]:
    """``host:port`` of each host of a libpq host list (ports: one for all, or one each)."""
    if "," not in host and "," not in port:
        return [f"{host}:{port}"]
    ports = port.split(",")
    servers = []
    for i, item in enumerate(host.split(",")):
        name, given = _split_one(item)
        if given is None:
            given = ports[i] if i < len(ports) else ports[-1]
        servers.append(f"{name}:{given or 5432}")
    return servers


def _split_one(item: str) -> tuple[str, str | None]:
    """(host, port or None) of one ``host[:port]`` of a list (``[v6]:port`` too)."""
    if item.startswith("["):
        name, _, rest = item[1:].partition("]")
        return f"[{name}]", rest[1:] if rest.startswith(":") else None
    name, colon, port = item.rpartition(":")
    return (unquote(name), port) if colon else (unquote(item), None)


def _split_hosts(hostlist: str) -> tuple[str | None, str | None]:
    """(host, port) of a URI's host part (a list of hosts is kept whole, without a port)."""
    if not hostlist:
        return None, None
    if "," in hostlist:  # several hosts: keep the list as it is (see _servers)
        return hostlist, ""
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
    """``dsn`` without the store's own query options (``namespace``, ``retention``,
    ``offload``, ``failover_timeout``: asyncpg
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


def names_target(dsn: str | None, pool_kwargs: dict[str, Any]) -> bool:
    """The DSN, the keyword arguments or the environment say which host to connect to."""
    query = (dsn or "").partition("?")[2].lower()
    return (
        "target_session_attrs" in pool_kwargs
        or "target_session_attrs=" in query
        or "PGTARGETSESSIONATTRS" in os.environ
    )


def seconds(text: str) -> float:
    """The ``retention`` of a DSN's query, in seconds; ValueError if it is not a number."""
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"retention in the DSN is a number of seconds, got {text!r}") from None
