"""The frameworks' own test files, fetched at test time (never copied into this repository).

:func:`framework_source` downloads the source distribution of a pinned version with pip
(``pip download --no-binary :all:``), unpacks it once into a cache folder
(``$STATEKEEP_TEST_CACHE``, else ``~/.cache/statekeep-tests``) and returns the unpacked
folder. A framework that cannot be fetched or is not installed skips its tests, saying
why; under CI (``CI=true``) it fails them instead, so CI cannot pass without them.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from tests.support import REPO


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(reason: str) -> None:
    """Skip the calling test, or fail it under CI."""
    if under_ci():
        pytest.fail(f"{reason} (under CI a missing framework is a failure)", pytrace=False)
    pytest.skip(reason)


def cache_dir() -> Path:
    base = os.environ.get("STATEKEEP_TEST_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "statekeep-tests"


def require_installed(dist: str, version: str) -> None:
    """Skip (fail under CI) unless ``dist`` is installed at exactly ``version``."""
    try:
        found = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        missing(f"{dist}=={version} is not installed: ./dev test installs it (statekeep[frameworks])")
        return
    if found != version:
        missing(f"{dist} {found} is installed, the adapter is validated against {version}: run ./dev test")


def framework_source(dist: str, version: str) -> Path:
    """The unpacked source distribution of ``dist==version`` (fetched and cached on first use)."""
    require_installed(dist, version)
    root = cache_dir()
    name = dist.replace("-", "_")
    unpacked = root / f"{name}-{version}"
    done = unpacked / ".statekeep-unpacked"
    if done.exists():
        return unpacked
    root.mkdir(parents=True, exist_ok=True)
    archives = list(root.glob(f"{name}-{version}.tar.gz")) + list(root.glob(f"{dist}-{version}.tar.gz"))
    if not archives:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"{dist}=={version}",
                "-d",
                str(root),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        archives = list(root.glob(f"{name}-{version}.tar.gz")) + list(root.glob(f"{dist}-{version}.tar.gz"))
        if result.returncode != 0 or not archives:
            missing(
                f"could not fetch the source distribution of {dist}=={version}: {result.stderr.strip()[-500:]}"
            )
    with tarfile.open(archives[0]) as tar:
        top = tar.getnames()[0].split("/")[0]
        tar.extractall(root, filter="data")
    if (root / top) != unpacked:
        (root / top).rename(unpacked)
    done.touch()
    return unpacked


# -- a framework's own pytest files, run in a child pytest against one statekeep backend --

BACKENDS = ("memory", "file", "sqlite", "postgres", "redis")


def backend_url(backend: str, tmp_path: Path) -> str:
    """A store URL for a fresh, empty store of ``backend`` that a child process can open
    (``memory://`` opens a MemoryStore of the child's own). Server stores get a namespace
    of their own on the shared throwaway server (tests/support/servers.py)."""
    from tests.support import servers

    if backend == "memory":
        return "memory://"
    if backend == "file":
        return str(tmp_path / "filestore")
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    space = servers.unique_name("fw").replace("_", "-")
    if backend == "postgres":
        return f"{servers.shared_postgres().dsn}{'&' if '?' in servers.shared_postgres().dsn else '?'}namespace={space}"
    if backend == "redis":
        return f"{servers.shared_redis().url}{'&' if '?' in servers.shared_redis().url else '?'}namespace={space}"
    raise ValueError(f"unknown backend {backend!r}")


@dataclass
class SuiteResult:
    """What a child pytest run reported, test by test (from its JUnit XML)."""

    passed: list[str]
    failed: dict[str, str]  # name -> the failure's message
    skipped: dict[str, str]
    output: str

    def explain(self) -> str:
        shown = "\n".join(f"  {name}: {why[:300]}" for name, why in sorted(self.failed.items()))
        return f"{len(self.failed)} failed of {len(self.passed) + len(self.failed)}:\n{shown}\n{self.output[-3000:]}"


def run_suite(
    files: list[Path],
    plugin: str,
    *,
    env: dict[str, str],
    deselect: list[str],
    cwd: Path,
    timeout: float = 900,
) -> SuiteResult:
    """Run ``files`` (a framework's own test files) in a child pytest with ``plugin`` (a
    module of this repository, e.g. ``tests.adapters._xyz_plugin``, imported in the child
    by its last name from its folder) loaded, ``env`` added to the environment
    and each of ``deselect`` (pytest node ids relative to ``cwd``) deselected."""
    # Not in cwd: the unpacked source is shared by every checkout (and run) on this machine.
    report = Path(tempfile.mkdtemp(prefix="statekeep-junit-")) / "junit.xml"
    # A framework's own tests are often a package named ``tests`` too, which shadows this
    # repository's in the child: the plugin is loaded by its module name from its folder.
    package, _, module = plugin.rpartition(".")
    plugin_dir = REPO.joinpath(*package.split(".")) if package else REPO
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        module,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        f"--junitxml={report}",
        "--rootdir",
        str(cwd),
        "-o",
        "addopts=",
        "-W",
        "ignore::DeprecationWarning",
    ]
    args += [f"--deselect={node}" for node in deselect]
    args += [str(path) for path in files]
    child_env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(plugin_dir), str(REPO), os.environ.get("PYTHONPATH", "")]),
        **env,
    )
    try:
        done = subprocess.run(args, cwd=cwd, env=child_env, capture_output=True, text=True, timeout=timeout)
        output = done.stdout + done.stderr
        if not report.exists():
            raise AssertionError(
                f"the framework's tests did not run (exit {done.returncode}):\n{output[-5000:]}"
            )
        cases = list(ElementTree.parse(report).getroot().iter("testcase"))
    finally:
        shutil.rmtree(report.parent, ignore_errors=True)
    passed: list[str] = []
    failed: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for case in cases:
        name = f"{case.get('classname')}::{case.get('name')}"
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skip = case.find("skipped")
        if problem is not None:
            failed[name] = (problem.get("message") or "") + "\n" + (problem.text or "")[-1500:]
        elif skip is not None:
            skipped[name] = skip.get("message") or ""
        else:
            passed.append(name)
    return SuiteResult(passed, failed, skipped, output)


def child_result(module: str, *args: str) -> dict[str, Any]:
    """Run ``python -m module *args`` from the repository in a new process (a program of
    its own, as after a restart) and return the JSON object its last line of output prints."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
