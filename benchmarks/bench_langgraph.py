"""``./dev bench langgraph``: runs :mod:`bench_langgraph_growth` (its docstring says what)."""

from __future__ import annotations

import sys

from bench_langgraph_growth import main

if __name__ == "__main__":
    sys.exit(main())
