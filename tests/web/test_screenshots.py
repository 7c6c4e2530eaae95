"""scripts/screenshots.py, which takes the docs' pictures of the viewer, runs and writes them."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

from tests.support import REPO
from tests.support.browser import browser_binaries

SCRIPT = REPO / "scripts" / "screenshots.py"


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_the_script_writes_both_pages_1280_wide(tmp_path: Path) -> None:
    browser_binaries()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "shots")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("runs.png", "run.png"):
        width, height = png_size(tmp_path / "shots" / name)
        assert width == 1280 and 900 <= height <= 2400, (name, width, height)
    assert proc.stdout.split() == [str(tmp_path / "shots" / "runs.png"), str(tmp_path / "shots" / "run.png")]


def test_the_committed_screenshots_are_small_pngs() -> None:
    for name in ("runs.png", "run.png"):
        path = REPO / "docs" / "screenshots" / name
        assert png_size(path)[0] == 1280
        assert path.stat().st_size < 400_000, f"{path} is large; take it again with scripts/screenshots.py"
