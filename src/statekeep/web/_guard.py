"""What every response of the viewer goes through: read-only methods, the token, and the
security headers (a strict Content-Security-Policy: no inline script or style, nothing from
elsewhere)."""

from __future__ import annotations

import hmac
import ipaddress
import logging
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode

from starlette.datastructures import MutableHeaders
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._core.passwords import redact_text
from ._approve import is_decision
from ._render import message

_log = logging.getLogger("statekeep.web")

COOKIE = "statekeep_token"  # + "_PORT": browsers share cookies across ports of one host


def cookie_name(scope: Scope) -> str:
    """The token cookie's name for the port this request came to."""
    server = scope.get("server")
    return f"{COOKIE}_{server[1]}" if server and server[1] else COOKIE


CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_READ = ("GET", "HEAD")


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a Host header, without its port, lower case ("[::1]" keeps its brackets)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    name, colon, port = header.rpartition(":")
    return name if colon and port.isdigit() else header


def _bracketed(host: str) -> str:
    host = host.lower()
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class Guard:
    """ASGI middleware: GET/HEAD only (else 405; with ``allow_approve``, POST of a decision too), the Host header (else 421), the token when
    one is set (else 401), and :data:`HEADERS` on every response. A pure ASGI middleware, so
    live streams pass through unbuffered.

    The Host check stops DNS rebinding: a web page whose name was made to point at
    127.0.0.1 could otherwise read the viewer from the user's own browser. It applies
    without a token, and on a loopback bind with one; a token on an open bind is what
    guards it then (other machines reach it by names the viewer cannot know)."""

    def __init__(
        self, app: ASGIApp, token: str | None, host: str = "127.0.0.1", allow_approve: bool = False
    ) -> None:
        self.app = app
        self.token = token
        self.allow_approve = allow_approve  # POST to a decision's path only (then token and host)
        self.hosts: frozenset[str] | None = None
        if token is None or is_loopback(host):
            self.hosts = frozenset({"localhost", "127.0.0.1", "[::1]", _bracketed(host)})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # the viewer has none: refused before any route sees it
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        started = False

        async def send_with_headers(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=msg)
                for name, value in HEADERS.items():
                    headers[name] = value
            await send(msg)

        posting = self.allow_approve and scope["method"] == "POST" and is_decision(scope["path"])
        if scope["method"] not in _READ and not posting:
            response = message("Read-only", "The viewer only shows runs: it changes nothing.", 405)
            response.headers["Allow"] = ", ".join(_READ)
            await response(scope, receive, send_with_headers)
            return
        if self.hosts is not None and not self._host_ok(scope):
            response = message(
                "Wrong host",
                "This viewer answers only to the Host it listens on (localhost, 127.0.0.1 or "
                "[::1]): open it by that address.",
                421,
            )
            await response(scope, receive, send_with_headers)
            return
        if self.token is not None:
            query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
            given = [v for k, v in query if k == "token"]
            if given and self._matches(given[-1]):
                await self._set_cookie(scope, query, receive, send_with_headers)
                return
            if given or not self._allowed(scope):
                response = message(
                    "Token needed",
                    "This viewer needs its token: open the URL with ?token=TOKEN once (it is kept in a "
                    "cookie), or send the header 'Authorization: Bearer TOKEN'.",
                    401,
                )
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send_with_headers)
                return
        try:
            await self.app(scope, receive, send_with_headers)
        except Exception as exc:
            if started:  # a live stream under way: the connection just ends
                raise
            # A store that cannot answer (a server gone, a damaged State): a short page and
            # one line in the server's log, no traceback.
            text = redact_text(f"{type(exc).__name__}: {exc}")
            _log.error("statekeep: %s %s failed: %s", scope["method"], scope["path"], text)
            await message("The store failed", text, 500)(scope, receive, send_with_headers)

    def _host_ok(self, scope: Scope) -> bool:
        assert self.hosts is not None
        given = [value for name, value in scope["headers"] if name == b"host"]
        return len(given) == 1 and host_name(given[0].decode("latin-1")) in self.hosts

    def _matches(self, given: str) -> bool:
        assert self.token is not None
        return hmac.compare_digest(given.encode(), self.token.encode())

    def _allowed(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, credential = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer" and self._matches(credential.strip()):
                    return True
            elif name == b"cookie":
                cookie: SimpleCookie = SimpleCookie()
                try:
                    cookie.load(value.decode("latin-1"))
                except Exception:  # a malformed cookie header is no token
                    continue
                wanted = cookie_name(scope)
                if wanted in cookie and self._matches(cookie[wanted].value):
                    return True
        return False

    async def _set_cookie(
        self, scope: Scope, query: list[tuple[str, str]], receive: Receive, send: Send
    ) -> None:
        """Keep the token in a cookie and send the browser to the same URL without it, so it
        does not stay in the address bar or the history."""
        rest = urlencode([(k, v) for k, v in query if k != "token"])
        # Only a path of this viewer: "//host" or "/\\host" (also sent %-encoded) would be
        # another site to a browser, so the leading slashes collapse into one.
        path = "/" + (scope.get("root_path", "") + scope["path"]).lstrip("/\\")
        target = quote(path, safe="/") + (f"?{rest}" if rest else "")
        response = RedirectResponse(target, status_code=303)
        assert self.token is not None
        response.set_cookie(cookie_name(scope), self.token, httponly=True, samesite="strict", path="/")
        await response(scope, receive, send)
