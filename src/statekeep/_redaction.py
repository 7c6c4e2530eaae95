"""Keeping passwords out of what statekeep shows: one rule for every store URL and DSN.

A URL's user information is what comes between ``://`` and the last ``@`` before the
host, where the authority ends at the first ``/``, ``?`` or ``#`` (an ``@`` in the path or
query is not part of it); it is shown as ``***``, user name included (some services put
their token there). A password holding ``/``, ``?`` or ``#`` unescaped would end the
authority early (``user:pa/ss@host`` reads as host ``user``, port ``pa``): such a URL is
refused by :func:`check_userinfo`, and shown redacted up to its last ``@``. A
``password=`` parameter (URL query or ``key=value`` DSN) is shown as ``password=***``.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
# A URL inside free text ends at white space or a quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]*")
_QUERY_PASSWORD = re.compile(r"(?i)([?&;]password=)[^&#]*")
_KEYWORD_PASSWORD = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&#'\"]+)")


def _split_authority(url: str) -> tuple[str, str, str] | None:
    """``(scheme://, authority, the rest)``, the authority ending at the first ``/``, ``?``
    or ``#``; None if ``url`` has no scheme."""
    match = _SCHEME.match(url)
    if match is None:
        return None
    rest = url[match.end() :]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    return url[: match.end()], rest[:end], rest[end:]


def split_userinfo(url: str) -> tuple[str | None, str]:
    """``(userinfo, url without it)``; userinfo is None when the URL has none.

    ``postgresql://u:p@h/db?application_name=me@work`` gives ``("u:p",
    "postgresql://h/db?application_name=me@work")``.
    """
    parts = _split_authority(url)
    if parts is None:
        return None, url
    head, authority, after = parts
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return None, url
    return userinfo, head + host + after


def _cut_short(url: str) -> bool:
    """Does ``url`` look like a password holding ``/``, ``?`` or ``#`` unescaped cut its
    authority short? Either the authority has no ``@`` and reads ``name:port`` with a port
    that is not a number while an ``@`` follows, or an ``@`` stands in the path or the
    fragment (only a query may hold one: ``?application_name=me@work``)."""
    parts = _split_authority(url)
    if parts is None:
        return False
    _, authority, after = parts
    path, _, fragment = after.partition("#")
    if "@" in path.split("?", 1)[0] or "@" in fragment:
        return True
    if "@" in authority or authority.startswith("["):  # IPv6: its colons are no port
        return False
    _, colon, port = authority.rpartition(":")
    return bool(colon) and not port.isdigit() and "@" in after


def _greedy_userinfo(url: str) -> tuple[str | None, str]:
    """For showing a URL that :func:`_cut_short` flags: everything up to the last ``@``."""
    match = _SCHEME.match(url)
    assert match is not None
    head, rest = url[: match.end()], url[match.end() :]
    userinfo, _, after = rest.rpartition("@")
    return userinfo, head + after


def _userinfo_to_hide(url: str) -> tuple[str | None, str]:
    return _greedy_userinfo(url) if _cut_short(url) else split_userinfo(url)


def check_userinfo(url: str) -> None:
    """Refuse a URL whose user name or password holds ``/``, ``?`` or ``#`` unescaped:
    drivers end the user information there, and would take part of the password for the
    host. The ValueError says how to write it and never shows the password."""
    if _cut_short(url):
        raise ValueError(
            f"the user name or password in {redact_url(url)!r} holds '/', '?' or '#', which a URL "
            "must percent-encode: write them as %2F, %3F and %23"
        )


def url_secrets(url: str) -> list[str]:
    """The passwords a URL or DSN holds, as written and percent-decoded, longest first
    (for replacing in texts that quote them, such as a driver's error message)."""
    found: set[str] = set()
    userinfo, rest = _userinfo_to_hide(url)
    if userinfo:
        found.add(userinfo)
        _, colon, password = userinfo.partition(":")
        if colon:
            found.add(password)
    for match in _QUERY_PASSWORD.finditer(rest):
        found.add(rest[match.end() :].split("&", 1)[0].split("#", 1)[0])
    if _SCHEME.match(url) is None:
        for match in _KEYWORD_PASSWORD.finditer(url):
            found.add(match.group(2).strip("'"))
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if s), key=len, reverse=True)


def redact_url(url: str) -> str:
    """``url`` (a whole URL or ``key=value`` DSN) with its user information and
    ``password=`` values replaced by ``***``."""
    if _SCHEME.match(url) is None:
        return _KEYWORD_PASSWORD.sub(r"\1***", url)
    userinfo, rest = _userinfo_to_hide(url)
    if userinfo is not None:
        scheme_end = _SCHEME.match(rest)
        assert scheme_end is not None
        rest = rest[: scheme_end.end()] + "***@" + rest[scheme_end.end() :]
    return _QUERY_PASSWORD.sub(r"\1***", rest)


def redact_text(text: str) -> str:
    """``text`` (a message) with every URL in it redacted as by :func:`redact_url`, and
    ``password=`` values replaced by ``***``."""
    text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group()), text)
    return _KEYWORD_PASSWORD.sub(r"\1***", text)


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with each of ``secrets`` (longest first) and every URL password replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return redact_text(text)
