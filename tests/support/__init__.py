"""What the tests share, in one place (conftest.py keeps only fixtures and hooks):
servers, a browser, network namespaces, older releases, the frameworks' suites, stores to plant
records in, and the child processes tests start (``tests/support/children/``)."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository's root: the working folder of the child processes the tests start.
REPO = Path(__file__).resolve().parents[2]


def is_root() -> bool:
    return os.geteuid() == 0
