"""Importing a server store's driver: when the store is made, never when statekeep is
imported, and with a message naming the extra to install when it is missing or too old."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from types import ModuleType

# extra: (module, store, what it is, (distribution, oldest version that works well)).
_DRIVERS: dict[str, tuple[str, str, str, tuple[str, tuple[int, ...]]]] = {
    # asyncpg 0.30: executemany that returns rows, which batched writes need.
    "postgres": ("asyncpg", "PostgresStore", "the asyncpg driver", ("asyncpg", (0, 30))),
    # redis 6.0 checks the server's host name on rediss:// by default; 6.2 fixed its TLS options.
    "redis": ("redis.asyncio", "RedisStore", "the redis package", ("redis", (6, 2))),
}


def import_driver(extra: str) -> ModuleType:
    """The driver of the store installed by ``statekeep[extra]``, or an ImportError saying
    which extra to install. An older installed version is refused too, since it would work
    worse without saying so."""
    module, store, what, (dist, wanted) = _DRIVERS[extra]
    try:
        driver = importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{store} needs {what}: pip install 'statekeep[{extra}]' ({exc})") from exc
    try:
        found = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:  # vendored or built in place: no metadata
        found = str(getattr(driver, "__version__", ""))
        if not found:
            return driver  # nothing to check against; let it run
    numbers = tuple(int(part) for part in re.findall(r"\d+", found)[: len(wanted)])
    if numbers < wanted:
        need = ".".join(map(str, wanted))
        raise ImportError(
            f"{store} needs {dist} {need} or newer, found {found}: pip install -U 'statekeep[{extra}]'"
        )
    return driver
