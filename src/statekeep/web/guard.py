"""What every response of the viewer goes through: read-only methods, the token, and the
security headers (a strict Content-Security-Policy: no inline script or style, nothing from
elsewhere)."""

from __future__ import annotations

import hmac
import ipaddress
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import MutableHeaders
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .render import message

COOKIE = "statekeep_token"
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


class Guard:
    """ASGI middleware: GET/HEAD only (else 405), the token when one is set (else 401), and
    :data:`HEADERS` on every response. A pure ASGI middleware, so live streams pass through
    unbuffered."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                headers = MutableHeaders(scope=msg)
                for name, value in HEADERS.items():
                    headers[name] = value
            await send(msg)

        if scope["method"] not in _READ:
            response = message("Read-only", "The viewer only shows runs: it changes nothing.", 405)
            response.headers["Allow"] = ", ".join(_READ)
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
        await self.app(scope, receive, send_with_headers)

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
                if COOKIE in cookie and self._matches(cookie[COOKIE].value):
                    return True
        return False

    async def _set_cookie(
        self, scope: Scope, query: list[tuple[str, str]], receive: Receive, send: Send
    ) -> None:
        """Keep the token in a cookie and send the browser to the same URL without it, so it
        does not stay in the address bar or the history."""
        rest = urlencode([(k, v) for k, v in query if k != "token"])
        target = scope.get("root_path", "") + scope["path"] + (f"?{rest}" if rest else "")
        response = RedirectResponse(target, status_code=303)
        assert self.token is not None
        response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict", path="/")
        await response(scope, receive, send)
