"""Command line: ``statekeep demo`` (more commands come with the State model)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="statekeep", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="save a run, kill it with SIGKILL mid-write, resume it")
    demo.add_argument("--store", default=".statekeep", help="folder of the FileStore (default: ./.statekeep)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run

        return run(args.store)
    return 2


if __name__ == "__main__":
    sys.exit(main())
