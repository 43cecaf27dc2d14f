"""Running the bot (`digest serve`) and the one-shot post (`digest run --post`, the CronJob path).

Both go through the same `Poster`: the same splitting, retries and exactly-once state, keyed by chat and window.
"""

from __future__ import annotations

import logging
import socket
import sys
import uuid

from telegram import Bot, Update

from checks.contract import Window
from digest.bot import DigestBot, DigestService, build_application
from digest.delivery import Outcome, Poster, Sender
from digest.engine import Config
from digest.render import Renderer
from digest.state import DeliveryState, StateError

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _owner() -> str:
    """Who holds a delivery lease: host, process and a random part (two instances never share one)."""
    return f"{socket.gethostname()}:{uuid.uuid4().hex[:8]}"


def window_key(window: Window) -> str:
    """The delivery key of an explicit window."""
    return f"window:{window.start.isoformat()}/{window.end.isoformat()}"


def serve(config: Config, token: str) -> int:
    """Run the bot until interrupted (long polling, or a webhook when DIGEST_TELEGRAM_WEBHOOK_URL is set)."""
    settings = config.settings
    try:
        state = DeliveryState(settings.state_path, _owner())
    except StateError as exc:
        print(f"digest: DIGEST_STATE_PATH: {exc}", file=sys.stderr)
        return EXIT_USAGE
    bot = DigestBot(config=config, state=state, service=DigestService(config))
    application = build_application(bot, token)
    try:
        if settings.telegram_webhook_url:
            secret = settings.telegram_webhook_secret.get_secret_value() if settings.telegram_webhook_secret else None
            application.run_webhook(
                listen=settings.telegram_webhook_listen,
                port=settings.telegram_webhook_port,
                url_path="telegram",
                webhook_url=settings.telegram_webhook_url,
                secret_token=secret,
                allowed_updates=Update.ALL_TYPES,
            )
        else:
            application.run_polling(allowed_updates=Update.ALL_TYPES, drop_pending_updates=False)
    finally:
        state.close()
    return EXIT_OK


async def post_window(config: Config, token: str, window: Window, fmt: str) -> int:
    """Compute the digest of ``window`` once and post it to every chat that has not had it; print it too."""
    settings = config.settings
    try:
        state = DeliveryState(settings.state_path, _owner())
    except StateError as exc:
        print(f"digest: DIGEST_STATE_PATH: {exc}", file=sys.stderr)
        return EXIT_USAGE
    service = DigestService(config, Renderer())
    # Computed once, printed and posted: every chat gets the same digest.
    digest = await service.digest(window)
    html = service.renderer.render(digest, "html")

    async def message() -> str:
        return html

    root = settings.telegram_api_url.rstrip("/")
    failures = 0
    try:
        async with Bot(token, base_url=f"{root}/bot", base_file_url=f"{root}/file/bot") as bot:
            poster = Poster(sender=Sender(bot, state=state), state=state)
            for chat_id in settings.telegram_chat_ids:
                result = await poster.post_once(chat_id, window_key(window), message)
                print(
                    f"digest: chat {chat_id}: {result.outcome.value}" + (f" ({result.error})" if result.error else ""),
                    file=sys.stderr,
                )
                if result.outcome in (Outcome.FAILED, Outcome.FAILED_PERMANENT, Outcome.BUSY):
                    failures += 1
    except StateError as exc:
        print(f"digest: DIGEST_STATE_PATH: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        state.close()
    sys.stdout.write(service.renderer.render(digest, fmt))
    return EXIT_FAILED if failures else EXIT_OK
