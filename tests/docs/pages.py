"""The docs pages (docs/**/*.md) and the README, and the code blocks in them, for the tests
that run every example (tests/docs/test_examples.py) and those that read one (an adapter's)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is (the page, the line after its opening fence) and its code."""

    page: Path
    line: int
    code: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def compiled(self) -> object:
        """The code compiled so that a traceback names the page and the line in it."""
        return compile("\n" * (self.line - 1) + self.code, str(self.page), "exec", dont_inherit=True)


def pages() -> list[Path]:
    """The README, then every docs page."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(page: Path, lang: str) -> list[Block]:
    """The ``lang`` blocks of ``page``, in order (```` ```sh ```` blocks are illustrations, never run)."""
    text = page.read_text()
    return [
        Block(page, text.count("\n", 0, match.start(1)) + 1, match.group(1))
        for match in re.finditer(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)
    ]


def all_blocks(lang: str) -> list[Block]:
    return [block for page in pages() for block in blocks(page, lang)]
