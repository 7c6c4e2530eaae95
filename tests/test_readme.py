"""Every Python example in the README runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_readme_example_runs(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})
    assert not any(p.name.startswith(".creating-") for p in tmp_path.rglob("*"))


def test_readme_starts_with_the_two_commands() -> None:
    head = README.read_text().split("\n")[:6]
    assert any(line.startswith("./dev demo") for line in head)
    assert any(line.startswith("./dev test") for line in head)
