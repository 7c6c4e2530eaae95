"""Keeping passwords out of what statekeep shows: one rule for every store URL and DSN.

A URL's user information is what comes between ``://`` and the last ``@`` before the
host, where the authority ends at the first ``/``, ``?`` or ``#`` (an ``@`` in the path or
query is not part of it). Its password, what follows the first ``:``, is shown as ``***``
(``postgresql://app:***@db/runs``); a user name alone is shown, since drivers take it as a
name, not a secret. A password holding ``/``, ``?`` or ``#`` unescaped would end the
authority early (``user:pa/ss@host`` reads as host ``user``, port ``pa``): such a URL is
refused by :func:`check_userinfo`, and shown redacted up to its last ``@``. A
``password=`` parameter (URL query or ``key=value`` DSN) is shown as ``password=***``.
Nothing else of a text is touched: the password is masked where it stands in a URL or
DSN, not wherever its characters happen to occur (a password ``1`` leaves ``127.0.0.1``).
"""

from __future__ import annotations

import re

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


def redact_url(url: str) -> str:
    """``url`` (a whole URL or ``key=value`` DSN) with its password and ``password=``
    values replaced by ``***``; the user name stays."""
    if _SCHEME.match(url) is None:
        return _KEYWORD_PASSWORD.sub(r"\1***", url)
    userinfo, rest = _userinfo_to_hide(url)
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        shown = f"{user}:***@" if colon else f"{userinfo}@"
        scheme_end = _SCHEME.match(rest)
        assert scheme_end is not None
        rest = rest[: scheme_end.end()] + shown + rest[scheme_end.end() :]
    return _QUERY_PASSWORD.sub(r"\1***", rest)


def redact_text(text: str) -> str:
    """``text`` (a message) with every URL in it redacted as by :func:`redact_url`, and
    ``password=`` values replaced by ``***``."""
    text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group()), text)
    return _KEYWORD_PASSWORD.sub(r"\1***", text)
