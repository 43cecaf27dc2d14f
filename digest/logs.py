"""Logging set-up that keeps secrets out of every line.

httpx logs each request URL at INFO, and Telegram's URLs contain the bot token (``/bot<token>/sendMessage``);
exceptions may quote URLs too. The formatter below replaces every configured secret in the final text of each
record — message, arguments and traceback alike — so no code path can leak one by accident.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable

_MASK = "[redacted]"


class RedactingFormatter(logging.Formatter):
    """A formatter that masks the given secrets wherever they appear in a formatted record."""

    def __init__(self, fmt: str, secrets: Iterable[str]) -> None:
        super().__init__(fmt)
        # Longest first, so that a secret containing another is masked whole.
        self._secrets = sorted({secret for secret in secrets if len(secret) >= 4}, key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        for secret in self._secrets:
            text = text.replace(secret, _MASK)
        return text


def configure_logging(verbose: bool, secrets: Iterable[str] = ()) -> None:
    """Log to stderr through the redacting formatter; chatty libraries stay at WARNING unless verbose."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", secrets))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    for noisy in ("httpx", "httpcore", "apscheduler", "telegram.ext.Application"):
        logging.getLogger(noisy).setLevel(logging.INFO if verbose else logging.WARNING)
    # The bot's own decisions (posted, late, refused, failed) are worth keeping without -v.
    logging.getLogger("digest").setLevel(logging.INFO)
