"""The last release's statekeep, run beside this one on one store (the upgrade rule).

Every change of a stored format bumps the version it changes once, so that an older
statekeep refuses what it would misread. The tests of that rule run the older code for
real: :func:`run_older` runs a snippet in a subprocess whose ``import statekeep`` is the
package as it stood at :data:`LAST_RELEASE`, taken from this repository's git history.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import textwrap
from functools import cache
from io import BytesIO
from pathlib import Path

from tests.support import REPO

#: The last release: main as it stood before this round's format changes (issue 21 on).
LAST_RELEASE = "f6ddde7eb8ee1b136f381902b1857bf2c66e2f36"


@cache
def older_source() -> Path:
    """A folder holding the package ``statekeep`` of :data:`LAST_RELEASE` (made once a run)."""
    target = Path(os.environ.get("PYTEST_OLDER_CACHE", "/tmp")) / f"statekeep-{LAST_RELEASE[:12]}"
    marker = target / "statekeep" / "__init__.py"
    if marker.exists():
        return target
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", LAST_RELEASE, "src/statekeep"],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        raise RuntimeError(
            f"the upgrade tests need commit {LAST_RELEASE[:12]} of this repository's history (a full "
            f"clone, not a shallow one): {detail.decode(errors='replace').strip() or exc}"
        ) from None
    staging = target.with_name(target.name + f".tmp{os.getpid()}")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(staging, filter="data")
    (staging / "src" / "statekeep").rename(staging / "statekeep")
    try:
        staging.rename(target)
    except OSError:  # another process made it first
        pass
    return target


def run_older(code: str, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) under the last release's statekeep; its output is text.

    The child checks that it imported the older package, not this one, before ``code`` runs.
    """
    source = older_source()
    prelude = textwrap.dedent(
        f"""
        import statekeep, pathlib
        assert pathlib.Path(statekeep.__file__).parent == pathlib.Path({str(source / "statekeep")!r}), statekeep.__file__
        """
    )
    env = {**os.environ, "PYTHONPATH": str(source)}
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=source,
    )
