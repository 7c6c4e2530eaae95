"""The command line's keys: a Keyring from ``--keys FILE`` or ``STATEKEEP_KEYS``.

Both hold one JSON document::

    {"current": "k2", "keys": {"k2": "<base64 of 32 bytes>", "k1": "<base64>"}}

``--keys`` names a file holding it; the environment variable holds the document itself
(as a secret manager injects it). No message ever shows a key, or the document.
"""

from __future__ import annotations

import base64
import binascii
import os
import sys
from pathlib import Path
from typing import Any

import click
import orjson

from .._protect.sealing import Keyring

KEYS_ENV = "STATEKEEP_KEYS"
KEYS_HELP = (
    'a JSON file {"current": "k2", "keys": {"k2": "<base64 of 32 bytes>", ...}} holding the '
    f"keys of an encrypted store; default: the same JSON document in ${KEYS_ENV}"
)
_SHAPE = '{"current": "k2", "keys": {"k2": "<base64 of 32 bytes>"}}'

keys_option = click.option("--keys", "keys_file", metavar="FILE", help=KEYS_HELP)


class KeysError(ValueError):
    """The keys given cannot make a Keyring: the message says what to fix (never a key)."""


def load_keyring(keys_file: str | None, environ: Any = None) -> Keyring | None:
    """The Keyring ``--keys FILE`` (or else ``$STATEKEEP_KEYS``) gives, or None if neither is set."""
    env = os.environ if environ is None else environ
    if keys_file is not None:
        where = f"the keys file {str(Path(keys_file).absolute())!r}"
        try:
            text = Path(keys_file).read_bytes()
        except FileNotFoundError:
            raise KeysError(f"{where} does not exist; give the path of a JSON file {_SHAPE}") from None
        except OSError as exc:
            raise KeysError(
                f"{where} cannot be read ({exc.strerror}); check its path and permissions"
            ) from None
    elif env.get(KEYS_ENV):
        where, text = f"${KEYS_ENV}", env[KEYS_ENV].encode()
    else:
        return None
    return parse_keys(text, where)


def parse_keys(text: bytes, where: str) -> Keyring:
    """A Keyring from a keys document; KeysError naming what is wrong (and no value)."""
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise KeysError(
            f"{where} is not JSON (line {exc.lineno}, column {exc.colno}); write it as {_SHAPE}"
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), dict) or not document["keys"]:
        raise KeysError(f'{where} needs a "keys" object of key id -> base64 key; write it as {_SHAPE}')
    current = document.get("current")
    if not isinstance(current, str) or current not in document["keys"]:
        raise KeysError(f'{where} needs "current": the id of one of its keys ({", ".join(document["keys"])})')
    keys: dict[str, bytes] = {}
    for kid, value in document["keys"].items():
        try:
            key = base64.b64decode(value, validate=True) if isinstance(value, str) else b""
        except binascii.Error:
            key = b""
        if len(key) != 32:
            raise KeysError(
                f"key {kid!r} in {where} is not the base64 of 32 bytes; make one with "
                "python -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())'"
            )
        keys[kid] = key
    try:
        return Keyring(keys, current=current)
    except ValueError as exc:  # a bad key id: the message names the id only
        raise KeysError(f"{where}: {exc}") from None


class ProgressBar:
    """A progress callback drawing a bar on stderr (if ``shown``), made when the first State
    is done (the total is known then), ``label`` before it."""

    def __init__(self, shown: bool, label: str = "") -> None:
        self.shown = shown
        self.label = label
        self.bar: Any = None

    @classmethod
    def on_terminal(cls, label: str, *, quiet: bool = False) -> ProgressBar:
        """A bar shown only when stderr is a terminal and not ``quiet`` (piped output
        stays clean for scripts)."""
        return cls(shown=not quiet and sys.stderr.isatty(), label=label)

    def __call__(self, done: int, total: int) -> None:
        if not self.shown:
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr)
            self.bar.__enter__()
        self.bar.update(done - self.bar.pos)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
