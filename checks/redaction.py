"""Masking secrets and personal data in log text before any of it is shown: the only way log lines reach a digest.

Log lines carry what their writers should never have logged: bearer tokens, ``password=`` in a connection string,
an API key in a URL, a customer's e-mail address, a session JWT. A digest is posted to a chat that more people read
than the logs' own readers, so every piece of log text a check keeps (a signature's shape, an example line) goes
through `redact` first, in the check, before it enters a `checks.contract.Finding`: the text, HTML and JSON outputs,
the chart and the logs then cannot show what the finding does not hold.

What is masked, each replaced by a marker in the style of VictoriaLogs' ``<N>`` / ``<IP4>`` so that a reader sees
that something was there:

* credentials in a URL (``scheme://user:pass@host``) → ``scheme://<secret>@host``;
* ``Authorization``-style values: ``Bearer …``, ``Basic …``, ``token …`` → ``Bearer <secret>``;
* a value after a key that names a secret — ``password``, ``passwd``, ``pwd``, ``secret``, ``token``, ``key``
  (``api_key``, ``apikey``, ``access-key``…), ``auth``, ``credential``, ``session``, ``cookie`` — written ``k=v``,
  ``k: v``, ``"k": "v"`` or ``k="v"`` → ``password=<secret>``;
* JSON Web Tokens (``eyJ….….…``) → ``<jwt>``;
* e-mail addresses → ``<email>``, also in a shape where a placeholder stands for part of one (``<_>@example.com``);
* long opaque strings: 32 or more hex digits → ``<hex>``; 32 or more base64 (or base64url) characters holding
  upper case, lower case and digits → ``<base64>`` (a key, a hash, a token with no key in front of it; a path or a
  UUID has not all three and stays).

Why these and not more: they are what OWASP's logging cheat sheet lists as never-log data that has a recognisable
shape. A secret with no shape (a short password written alone) cannot be told from a word; the policy's
``show_log_examples: false`` keeps only the collapsed shapes for clusters where that risk is too high.
"""

from __future__ import annotations

import re

MASKED = "<secret>"

_URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@")
_SCHEME_VALUE = re.compile(r"(?i)\b(?P<scheme>bearer|basic|token|digest)(?P<gap>\s+)[A-Za-z0-9._~+/=-]{8,}")
# A key naming a secret: over-matching ("monkey", "author") masks a harmless value, which is the cheaper mistake.
_SENSITIVE_NAME = r"[\w.-]*(?:passw(?:or)?d|pwd|secret|token|key|auth|credential|session|cookie)[\w.-]*"
_QUOTED_PAIR = re.compile(rf'(?i)(?P<key>"{_SENSITIVE_NAME}"\s*:\s*)"(?:[^"\\]|\\.)*"')
# "k=v" with any spacing; "k:v" only without a space, so that a message such as "auth: connection refused" stays.
_PAIR = re.compile(rf"(?i)(?P<key>\b{_SENSITIVE_NAME}(?:\s*=\s*|:))(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;&\"'}}\])]+)")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
# The backends' placeholders (Loki's ``<_>``, VictoriaLogs' ``<N>``, ``<IP4>``…), not this module's own markers.
_PLACEHOLDER = r"<(?:_|[A-Z][A-Z0-9]*)>"
# An address in a collapsed shape: a placeholder for part of it still leaves the rest to read, as in Loki's pattern
# ``login failed for <_>@example.com``.
_SHAPED_EMAIL = re.compile(
    rf"(?:[\w.%+-]|{_PLACEHOLDER})*{_PLACEHOLDER}(?:[\w.%+-]|{_PLACEHOLDER})*@(?:[\w.-]|{_PLACEHOLDER})+"
    rf"|\b[\w.%+-]+@{_PLACEHOLDER}(?:[\w.-]|{_PLACEHOLDER})*"
)
_HEX = re.compile(r"\b[0-9a-fA-F]{32,}\b")
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/_-])(?:[A-Za-z0-9+/]{32,}={0,2}|[A-Za-z0-9_-]{32,})")


def _opaque(match: re.Match[str]) -> str:
    # Random bytes in base64 hold upper case, lower case and digits within 32 characters; a path (slashes between
    # words) or a UUID (no upper case) does not, and stays readable.
    run = match.group(0)
    mixed = any(c.isupper() for c in run) and any(c.islower() for c in run) and any(c.isdigit() for c in run)
    return "<base64>" if mixed and run.count("/") < 2 else run


def _masked_value(match: re.Match[str]) -> str:
    value = match.group("value")
    if value.strip("\"'") in (MASKED, "<jwt>"):  # already masked by an earlier rule
        return match.group(0)
    return f"{match.group('key')}{MASKED}"


def redact(text: str) -> str:
    """``text`` with credentials, secret values, JWTs, e-mail addresses and long opaque strings masked."""
    text = _URL_CREDENTIALS.sub(lambda match: f"{match.group('scheme')}{MASKED}@", text)
    text = _JWT.sub("<jwt>", text)
    text = _SCHEME_VALUE.sub(lambda match: f"{match.group('scheme')}{match.group('gap')}{MASKED}", text)
    text = _QUOTED_PAIR.sub(lambda match: f'{match.group("key")}"{MASKED}"', text)
    text = _PAIR.sub(_masked_value, text)
    text = _EMAIL.sub("<email>", text)
    text = _SHAPED_EMAIL.sub("<email>", text)
    text = _HEX.sub("<hex>", text)
    return _BASE64.sub(_opaque, text)


def shorten(text: str, limit: int = 120) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis (after redaction: a cut never reveals)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"
