"""The ImportError of an adapter whose framework is not installed: it names the extra."""

from __future__ import annotations


def framework_missing(adapter: str, framework: str, extra: str, exc: ImportError) -> ImportError:
    """What ``import statekeep.adapters.<adapter>`` raises when importing ``framework``
    failed with ``exc``: a ModuleNotFoundError (same ``name``) for a missing module, else an
    ImportError (an installed version it cannot use), each naming the extra to install."""
    install = f"pip install 'statekeep[{extra}]'"
    if isinstance(exc, ModuleNotFoundError):
        return ModuleNotFoundError(
            f"statekeep.adapters.{adapter} needs {framework}, which is not installed here ({exc}): "
            f"install it with {install}",
            name=exc.name,
        )
    return ImportError(
        f"statekeep.adapters.{adapter} needs {framework} in a version it supports ({exc}): "
        f"install one with {install}",
        name=exc.name,
    )
