"""The run viewer: a read-only web app over a store (``pip install 'statekeep[web]'``).

``statekeep serve --store URL`` serves it from the command line. From Python,
:func:`create_app` gives the ASGI app, :func:`serve` runs it until Ctrl-C, and
:func:`start` runs it in a background thread: the way to look at a
:class:`~statekeep.MemoryStore`, which lives only in its own process.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover  (the test environment has the extra)
    raise ImportError(f"the viewer needs the web extra: pip install 'statekeep[web]' ({exc})") from exc

from .._core.publish import publish
from ._app import create_app
from ._server import Viewer, serve, start

__all__ = ["Viewer", "create_app", "serve", "start"]
publish(__name__, globals(), __all__)
