"""The frameworks' own test files, fetched at test time (never copied into this repository).

:func:`framework_source` downloads the source distribution of a pinned version with pip
(``pip download --no-binary :all:``), unpacks it once into a cache folder
(``$STATEKEEP_TEST_CACHE``, else ``~/.cache/statekeep-tests``) and returns the unpacked
folder. A framework that cannot be fetched or is not installed skips its tests, saying
why; under CI (``CI=true``) it fails them instead, so CI cannot pass without them.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest


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
