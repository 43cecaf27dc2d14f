"""Logging set-up that keeps secrets out of every line.

httpx logs each request URL at INFO, and Telegram's URLs contain the bot token (``/bot<token>/sendMessage``);
exceptions may quote URLs too. The formatter below replaces every configured secret in the final text of each
record — message, arguments and traceback alike — so no code path can leak one by accident. A secret travels
percent-encoded as often as not (a token ``123:ABC`` is ``123%3AABC`` in a quoted URL, a password in a URL's user
info is written encoded), so each one is also masked in its encoded forms, whatever the case of their hex digits.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

_MASK = "[redacted]"


class RedactingFormatter(logging.Formatter):
    """A formatter that masks the given secrets wherever they appear in a formatted record."""

    def __init__(self, fmt: str, secrets: Iterable[str]) -> None:
        super().__init__(fmt)
        self._pattern = secrets_pattern(secrets)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if self._pattern is None:
            return text
        return self._pattern.sub(_MASK, text)


def encoded_forms(secret: str) -> set[str]:
    """``secret`` as written and percent-encoded the ways URLs and forms encode it."""
    return {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}


def secrets_pattern(secrets: Iterable[str]) -> re.Pattern[str] | None:
    """One pattern matching any of ``secrets`` in any encoded form; None when there is nothing to mask.

    Secrets shorter than 4 characters are skipped: masking every "ab" would garble the log and hide nothing.
    """
    forms = {form for secret in secrets if len(secret) >= 4 for form in encoded_forms(secret)}
    if not forms:
        return None
    # Longest first, so that a secret containing another is masked whole.
    alternatives = [_escaped(form) for form in sorted(forms, key=len, reverse=True)]
    return re.compile("|".join(alternatives))


def _escaped(form: str) -> str:
    """``form`` as a regular expression in which each ``%XY`` escape also matches ``%xy``."""
    pieces = re.split(r"(%[0-9A-Fa-f]{2})", form)
    return "".join(
        f"%(?i:{re.escape(piece[1:])})" if index % 2 else re.escape(piece) for index, piece in enumerate(pieces)
    )


# The logger of the backend queries, one line each, shown with -v (`digest.backends.http.HttpSource`).
QUERY_LOG = "digest.queries"
# The API paths of the backends' queries (Prometheus and VictoriaMetrics, vmselect's, VictoriaLogs', Loki's).
_BACKEND_PATHS = ("/api/v1/", "/select/logsql/", "/loki/api/v1/")


class _NotBackendQueries(logging.Filter):
    """Drops httpx's request line of a backend query (logged by the digest with its query and time instead)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        url = str(args[1]) if len(args) > 1 else ""
        return not any(path in url for path in _BACKEND_PATHS)


def configure_logging(verbose: bool, secrets: Iterable[str] = ()) -> None:
    """Log to stderr through the redacting formatter; chatty libraries stay at WARNING unless verbose."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", secrets))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    for noisy in ("apscheduler", "telegram.ext.Application"):
        logging.getLogger(noisy).setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    httpx_log = logging.getLogger("httpx")
    httpx_log.setLevel(logging.INFO if verbose else logging.WARNING)
    # httpx's "HTTP Request: POST … 200 OK" of a backend query says neither the query nor its time: each has its own
    # line instead (`digest.backends.http`, logger "digest.queries"). The chat services' calls keep httpx's line.
    if not any(isinstance(one, _NotBackendQueries) for one in httpx_log.filters):
        httpx_log.addFilter(_NotBackendQueries())
    logging.getLogger(QUERY_LOG).setLevel(logging.DEBUG if verbose else logging.WARNING)
    # The bot's own decisions (posted, late, refused, failed) are worth keeping without -v.
    logging.getLogger("digest").setLevel(logging.INFO)
