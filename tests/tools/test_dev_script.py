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


# Stands in for an interpreter whose virtualenv only notes each program it runs: `-m venv DIR`
# makes DIR/bin/python and the tools ./dev test runs (ruff, mypy, mkdocs), which each write
# "DIR/bin/NAME ARGS" to $DEV_LOG.
RECORDING_PYTHON = """#!/bin/sh
if [ "$1" = -m ] && [ "$2" = venv ]; then
    mkdir -p "$3/bin"
    for name in python ruff mypy mkdocs; do
        printf '#!/bin/sh\\necho "%s $*" >> "$DEV_LOG"\\n' "$3/bin/$name" > "$3/bin/$name"
        chmod +x "$3/bin/$name"
    done
fi
"""


def test_dev_test_runs_the_whole_suite_on_python3_and_the_core_suites_on_the_other_pythons(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    (project / "src" / "statekeep").mkdir(parents=True)
    for name in ("dev", "pyproject.toml", "src/statekeep/__init__.py"):
        shutil.copy(ROOT / name, project / name)
    python = tmp_path / "python3"
    python.write_text(RECORDING_PYTHON)
    python.chmod(0o755)
    # pyenv's folder with a 3.12 and no 3.13
    pyenv = tmp_path / "pyenv"
    (pyenv / "versions" / "3.12.1" / "bin").mkdir(parents=True)
    shutil.copy(python, pyenv / "versions" / "3.12.1" / "bin" / "python3.12")
    # A PATH of the few programs ./dev test uses, and stand-ins for the servers and the browser
    # (seen there, ./dev installs nothing: no apt-get on this PATH)
    bin = tmp_path / "bin"
    bin.mkdir()
    for tool in ("bash", "cat", "chmod", "cut", "dirname", "grep", "id", "ls", "mkdir", "sha256sum", "sort"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin / tool).symlink_to(found)
    for tool in ("redis-server", "openssl", "curl", "ip", "chromium", "chromedriver"):
        (bin / tool).write_text("#!/bin/sh\n")
        (bin / tool).chmod(0o755)
    log = tmp_path / "ran.log"
    base = {"PATH": str(bin), "PYTHON": str(python), "PYENV_ROOT": str(pyenv), "DEV_LOG": str(log)}

    def dev_test(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        log.write_text("")
        return subprocess.run(
            [str(project / "dev"), "test", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**base, **env},
        )

    done = dev_test()
    assert done.returncode == 0, done.stderr
    ran = log.read_text().splitlines()
    assert ".venv-3.12/bin/python -m pip install --quiet -e .[test]" in ran  # set up as .venv is
    ran = [line for line in ran if " -m pip " not in line]
    assert ran[:3] == [
        ".venv/bin/ruff check .",
        ".venv/bin/ruff format --check .",
        ".venv/bin/mypy src/statekeep",
    ]
    pytest_runs = [line for line in ran if " -m pytest " in line]
    assert pytest_runs[0] == ".venv/bin/python -m pytest -n auto"  # the whole suite
    assert len(pytest_runs) == 2
    assert pytest_runs[1].startswith(".venv-3.12/bin/python -m pytest -n auto tests/")  # the core suites
    assert "3.13" in done.stderr and "not found" in done.stderr, done.stderr

    in_ci = dev_test(CI="true")  # CI must not pass without every Python
    assert in_ci.returncode != 0 and "3.13" in in_ci.stderr, in_ci.stderr

    soak = dev_test("--soak")  # the lint, then the soak alone, in one process
    assert soak.returncode == 0, soak.stderr
    ran = [line for line in log.read_text().splitlines() if " -m pip " not in line]
    assert ran[:3] == [
        ".venv/bin/ruff check .",
        ".venv/bin/ruff format --check .",
        ".venv/bin/mypy src/statekeep",
    ]
    assert [line for line in ran if " -m pytest " in line] == [
        ".venv/bin/python -m pytest -n 0 -s -p no:randomly tests/agent/test_exactly_once_soak.py"
        " tests/adapters/test_adk_differential.py tests/adapters/test_langgraph_memory_diff.py"
        " tests/stores/redis/test_redis_cluster_contract.py tests/stores/redis/test_redis_cluster.py"
        " tests/stores/postgres/test_pgbouncer_contract.py tests/stores/postgres/test_postgres_failover.py"
    ]
