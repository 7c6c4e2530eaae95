"""MkDocs hook (mkdocs.yml ``hooks``): the docstrings' Sphinx roles read as code in the API
reference. mkdocstrings renders ``:class:`~statekeep.Keyring``` as ``:class:<code>~statekeep.Keyring</code>``;
this shows ``Keyring`` (a ``~`` keeps the last part only, as Sphinx does)."""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|func|meth|attr|exc|mod|data|obj|const):<code>([^<]*)</code>")


def shown(match: re.Match[str]) -> str:
    target = match.group(1)
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"<code>{target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub(shown, html)
