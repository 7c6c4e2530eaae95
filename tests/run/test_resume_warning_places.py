"""ResumeWarning wherever the caller's code runs: ``python -c``, code on stdin, the REPL.

Code run that way has a ``__main__`` whose loader cannot give its source (the builtin
importer); the warning must still be shown at the caller's line, never turn into an
ImportError. Each case runs in a real interpreter, with the warning on its stderr.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from statekeep import FileStore, State, agent_info

# The caller's code: the resume is on its third line (a different agent name).
BEGIN_RUN = """\
from statekeep import FileStore, agent_info
state = FileStore("runs").load("job")
state.begin_run(agent_info(name="other", model="m", system="A", tools=[]))
print("resumed", state.last_agent["name"])
"""
AGENT_RUN = """\
from statekeep import Agent, FileStore, ScriptedModel
state = FileStore("runs").load("job")
print("resumed", Agent(ScriptedModel(["done"], name="m"), name="other", system="A", store=FileStore("runs")).run(state))
"""
WARNED = "ResumeWarning: State 'job' is resumed by a different agent (name: 'agent' -> 'other')"
# The plain REPL reads each line as a statement of its own, line 1 of "<stdin>"; from Python
# 3.13 on, of "<stdin>-N" for the Nth statement (from 0), here the third.
REPL_LINE = "<stdin>:1" if sys.version_info < (3, 13) else "<stdin>-2:1"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder whose ``runs`` store holds ``job``, run once by agent 'agent' (model 'm')."""
    state = State("resume me", id="job")
    state.begin_run(agent_info(name="agent", model="m", system="A", tools=[]))
    FileStore(tmp_path / "runs").save(state)
    return tmp_path


def run(folder: Path, args: list[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "always::UserWarning", *args],
        cwd=folder,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("code", [BEGIN_RUN, AGENT_RUN], ids=["begin_run", "Agent.run"])
@pytest.mark.parametrize(
    "how, where",
    [("-c", "<string>:3"), ("stdin", "<stdin>:3"), ("repl", REPL_LINE)],
)
def test_resume_warning_shows_at_the_callers_line(folder: Path, code: str, how: str, where: str) -> None:
    if how == "-c":
        done = run(folder, ["-c", code], None)
    elif how == "stdin":
        done = run(folder, ["-"], code)
    else:
        done = run(folder, ["-i", "-q"], code)
    assert "ImportError" not in done.stderr, done.stderr
    assert f"{where}: {WARNED}" in done.stderr, done.stderr
    assert "resumed" in done.stdout, done.stderr
    assert done.returncode == 0, done.stderr
