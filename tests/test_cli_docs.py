"""The bash blocks of docs-pending/cli.md (the README's part on follow, --json, stats and exit
statuses) run as they are, in order, in one shell in an empty folder, with this Python's
``statekeep`` first on PATH. (Once the lead moves the text into the README, this test moves
with it.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs-pending" / "cli.md"


def test_the_cli_docs_bash_blocks_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 4
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", "\n".join(blocks)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "demo-booking 15 entries, 4 turns" in lines
    assert lines[-3:] == ["exit status 1", "exit status 2", "exit status 1"]
