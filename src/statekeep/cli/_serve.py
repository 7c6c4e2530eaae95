"""``statekeep serve``: the run viewer in a browser (needs the ``web`` extra)."""

from __future__ import annotations

import click

from ._common import USAGE, fail, open_store_at, refuse_memory, reporting, store_option
from ._group import main
from ._keys import keys_option

TOKEN_ENV = "STATEKEEP_TOKEN"


@main.command()
@store_option
@click.option("--host", default="127.0.0.1", show_default=True, help="the address to listen on")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="0: a free port")
@click.option("--open", "open_browser", is_flag=True, help="open the viewer in the default browser")
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    help=f"require this token (default ${TOKEN_ENV}): a bearer header, or ?token= once in the URL "
    "(kept as a cookie); needed for any --host but loopback",
)
@click.option(
    "--allow-approve",
    is_flag=True,
    help="add approve and reject buttons for tool calls waiting on a person (needs --token)",
)
@keys_option
def serve(
    store_url: str,
    host: str,
    port: int,
    open_browser: bool,
    token: str | None,
    allow_approve: bool,
    keys_file: str | None,
) -> None:
    """Look at the runs in a browser: a read-only viewer, live as runs are saved. With
    --allow-approve (and a --token) it also approves or rejects tool calls that wait on a person.

    Prints "statekeep: serving URL" once it listens; Ctrl-C stops it."""
    try:
        from ..web._server import check_host
        from ..web._server import serve as run_viewer
    except ImportError:
        fail("the viewer needs the web extra: pip install 'statekeep[web]'", USAGE)
    try:
        check_host(host, token, allow_approve)
    except ValueError as exc:
        fail(str(exc), USAGE)
    with reporting(), open_store_at(store_url, keys_file) as store:
        refuse_memory(store, "the viewer shows runs other processes save")
        store.list(limit=1)  # refuses what is no store, or a server that refuses us, before listening
        try:
            run_viewer(
                store,
                host=host,
                port=port,
                token=token,
                open_browser=open_browser,
                allow_approve=allow_approve,
            )
        except OSError as exc:
            fail(f"cannot listen on {host}:{port}: {exc.strerror or exc} (pick another --port, or 0)", USAGE)
