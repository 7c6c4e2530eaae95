"""./dev, the newcomer's entry point: its first run says what it is setting up."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support import REPO

ROOT = REPO

# Stands in for the interpreter ./dev makes its virtualenv with (the real first setup
# downloads packages for minutes): `-m venv DIR` makes DIR/bin/python and DIR/bin/statekeep,
# which note each call on stderr, so the test sees what ./dev said before each step.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = -m ] && [ "$2" = venv ]; then
    echo "STEP: venv" >&2
    mkdir -p "$3/bin"
    printf '#!/bin/sh\\necho "STEP: $*" >&2\\n' > "$3/bin/python"
    printf '#!/bin/sh\\necho "ran statekeep $*"\\n' > "$3/bin/statekeep"
    chmod +x "$3/bin/python" "$3/bin/statekeep"
fi
"""


def test_the_first_run_says_what_it_sets_up_before_each_slow_step(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "src" / "statekeep").mkdir(parents=True)
    shutil.copy(ROOT / "dev", project / "dev")
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    shutil.copy(ROOT / "src" / "statekeep" / "__init__.py", project / "src" / "statekeep" / "__init__.py")
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)

    def dev(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(project / "dev"), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake)},
        )

    first = dev("list")
    assert first.returncode == 0, first.stderr
    assert first.stdout == "ran statekeep list\n"
    lines = first.stderr.splitlines()
    venv = lines.index("STEP: venv")
    install = next(i for i, line in enumerate(lines) if line.startswith("STEP: -m pip install"))
    assert venv >= 1 and "virtualenv" in lines[venv - 1] and ".venv" in lines[venv - 1], lines
    said = [line for line in lines[venv + 1 : install] if not line.startswith("STEP:")]
    assert said and "installing" in said[-1] and "minute" in said[-1], lines
    again = dev("list")  # set up already: nothing to say
    assert (again.returncode, again.stderr, again.stdout) == (0, "", "ran statekeep list\n")
