"""The ``statekeep`` command group; each command lives in a module of this package."""

from __future__ import annotations

import click


@click.group(
    epilog="Exit status: 0 ok, 1 not found (store or State), 2 bad usage, "
    "3 data error (a damaged State, or not a statekeep store), "
    "4 store unreachable (its server cannot be reached, or refused statekeep), 130 stopped with Ctrl-C."
)
@click.version_option(package_name="statekeep", message="statekeep %(version)s")
def main() -> None:
    """Keep AI agent runs outside the process, and look at them."""
