"""Running the bot (`digest serve`) and the one-shot post (`digest run --post`, the CronJob path).

Both go through the same `Poster`: the same splitting, retries and exactly-once state, keyed by chat and window.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from telegram import Update

from digest.app.bot import make_bot
from digest.app.channels import open_channels
from digest.app.engine import Config, make_chart, make_digest, make_week, open_history_store, stored_history
from digest.app.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE, for_state_error
from digest.app.health import DigestMetrics, listen
from digest.app.replay import replay
from digest.app.service import DigestService
from digest.channels.channel import Channel, DeliveryError, Outcome, Photo
from digest.channels.schedule import weekly_key
from digest.channels.state import DeliveryState
from digest.channels.telegram.bot import build_application
from digest.channels.telegram.sender import open_bot
from digest.checks.contract import Window
from digest.output.render import Renderer, headline, most_said, unseen_spans
from digest.pipeline.score import Digest
from digest.pipeline.state import StateError

log = logging.getLogger(__name__)


def owner() -> str:
    """Who holds a delivery lease: host, process and a random part (two instances never share one)."""
    return f"{socket.gethostname()}:{uuid.uuid4().hex[:8]}"


# Draws a chart when called (None when it could not be drawn).
Drawing = Callable[[], Awaitable[Photo | None]]


def window_key(window: Window) -> str:
    """The delivery key of an explicit window."""
    return f"window:{window.start.isoformat()}/{window.end.isoformat()}"


def serve(config: Config, token: str) -> int:
    """Run the bot until interrupted (long polling, or a webhook when DIGEST_TELEGRAM_WEBHOOK_URL is set)."""
    settings = config.settings
    holder = owner()
    try:
        state = DeliveryState(settings.state_path, holder)
    except StateError as exc:
        print(f"digest: DIGEST_STATE_PATH: {exc}", file=sys.stderr)
        return for_state_error(exc)
    try:
        # The Bot API is asked once (getMe, retried within the delivery budget) before polling starts, so that a
        # wrong API root or a refused token is one line and an exit code, not python-telegram-bot's traceback.
        asyncio.run(_check_bot(token, settings.telegram_api_url))
    except DeliveryError as exc:
        state.close()
        print(f"digest: cannot start the bot: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.permanent else EXIT_FAILED
    sockets: list[socket.socket] = []
    if settings.health_port:
        try:
            sockets = listen(settings.health_port)
        except OSError as exc:
            state.close()
            print(
                f"digest: DIGEST_HEALTH_PORT: port {settings.health_port} cannot be opened: {exc.strerror}",
                file=sys.stderr,
            )
            return EXIT_USAGE
    store = open_history_store(settings)
    service = DigestService(
        config, renderer=Renderer(config.settings.links()), metrics=DigestMetrics(), history_store=store
    )
    bot = make_bot(config, state, service, health_sockets=sockets, owner=holder)
    application = build_application(bot, token, handle_signals=True)
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
                stop_signals=None,  # SIGTERM and SIGINT go to DigestBot.stop_now
            )
        else:
            application.run_polling(
                allowed_updates=Update.ALL_TYPES,
                drop_pending_updates=False,
                stop_signals=None,  # SIGTERM and SIGINT go to DigestBot.stop_now
            )
    finally:
        state.close()
        if store is not None:
            store.close()
    return EXIT_OK


async def _check_bot(token: str, api_root: str) -> None:
    """`DeliveryError` unless the Bot API at ``api_root`` answers ``getMe`` for ``token``."""
    async with open_bot(token, api_root):
        pass


@dataclass
class ChannelPoster:
    """Posts a digest to every recipient of every channel once per key (the `run --post` and `replay --post` path).

    Failures are counted apart by kind: a transient one (a service busy, the claim held elsewhere) is worth a retry of
    the whole command, a permanent one (chat not found, a receiver refusing the post) is not — retrying would only ask
    again what was refused for good, while the recipients that had the post keep it (each is posted once per key).
    """

    channels: tuple[Channel, ...]
    renderer: Renderer
    failures: int = 0
    permanent_failures: int = 0

    async def __call__(
        self, digest: Digest, photo: Photo | None = None, key: str | None = None, draw: Drawing | None = None
    ) -> str:
        """Post ``digest`` (and ``photo``) under ``key`` (by default the window's); an account of each recipient."""
        return await self.post_text(
            key or window_key(digest.window),
            digest.window.label,
            lambda fmt: self.renderer.render(digest, fmt),
            photo,
            draw,
        )

    async def post_text(
        self,
        key: str,
        label: str,
        text: Callable[[str], str],
        photo: Photo | None = None,
        draw: Drawing | None = None,
    ) -> str:
        """Post ``text(format)`` (and ``photo``) once per recipient under the delivery ``key``; the account as above.

        Each channel's text is rendered once, in its format, whatever its number of recipients. ``draw``: the chart,
        drawn only if a recipient still needs it (a rerun that finds every post made draws nothing), and once.
        """
        rendered: dict[str, str] = {}

        def message(fmt: str) -> Callable[[], Awaitable[str]]:
            async def render() -> str:
                if fmt not in rendered:
                    rendered[fmt] = text(fmt)
                return rendered[fmt]

            return render

        drawn: asyncio.Future[Photo | None] | None = None

        async def attachment() -> Photo | None:
            nonlocal drawn
            if photo is not None or draw is None:
                return photo
            if drawn is None:
                drawn = asyncio.ensure_future(draw())
            return await asyncio.shield(drawn)

        addresses = [(channel, recipient) for channel in self.channels for recipient in channel.recipients]
        # Each recipient on its own: one whose sends stall never holds another's post.
        results = await asyncio.gather(
            *(
                channel.post_once(recipient, key, message(channel.format), photo=attachment)
                for channel, recipient in addresses
            )
        )
        outcomes: list[str] = []
        for (channel, recipient), result in zip(addresses, results, strict=True):
            error = f" ({result.error})" if result.error else ""
            log.info("%s %s, %s: %s%s", channel.name, recipient, label, result.outcome.value, error)
            outcomes.append(f"{channel.title.lower()} {recipient}: {result.outcome.value}{error}")
            if result.outcome in (Outcome.FAILED, Outcome.BUSY):
                self.failures += 1
            elif result.outcome is Outcome.FAILED_PERMANENT:
                self.permanent_failures += 1
        return "; ".join(outcomes)


@asynccontextmanager
async def channel_poster(config: Config) -> AsyncIterator[ChannelPoster]:
    """A `ChannelPoster` on every channel of DIGEST_CHANNELS, open, over the delivery state.

    `StateError` if the state file is unusable; `DeliveryError` if a channel cannot be opened (Telegram's getMe).
    """
    settings = config.settings
    async with open_channels(settings, owner()) as channels:
        renderer = Renderer(settings.links())
        for channel in channels:
            renderer.preload(channel.format)
        yield ChannelPoster(channels, renderer)


async def post_window(
    config: Config, window: Window, fmt: str, chart: Path | None = None, key: str | None = None
) -> int:
    """Compute the digest of ``window`` once, post it to every recipient that has not had it, and print it.

    With ``chart``, the window's chart is drawn there and attached to each post. ``key`` is the delivery's (the
    scheduled day's for `run --scheduled`); by default the window's own.
    """
    store = open_history_store(config.settings)
    try:
        digest = await make_digest(config, window, history=stored_history(config, store))
    finally:
        if store is not None:
            store.close()
    photo = None
    if chart is not None:
        caption = await make_chart(
            config, window, chart, headline(digest), unseen=unseen_spans(digest), said=most_said(digest)
        )
        photo = Photo(png=await asyncio.to_thread(chart.read_bytes), caption=caption)

    async def draw() -> Photo | None:
        """The chart the bot attaches, for the posts of this run (drawn only when one is still owed)."""
        try:
            with tempfile.TemporaryDirectory(prefix="digest-chart-") as folder:
                path = Path(folder) / "digest.png"
                caption = await make_chart(
                    config, window, path, headline(digest), unseen=unseen_spans(digest), said=most_said(digest)
                )
                return Photo(png=await asyncio.to_thread(path.read_bytes), caption=caption)
        except Exception:  # a chart is a bonus: the digest goes out without it rather than not at all
            log.exception("could not draw the chart of %s; posting without it", window.label)
            return None

    # As the bot's posts: the chart follows the text unless DIGEST_TELEGRAM_CHART is off (or --chart drew it).
    drawing = draw if photo is None and config.settings.telegram_chart else None
    return await _post_and_print(
        config,
        lambda post: post(digest, photo, key, drawing),
        printed=Renderer(config.settings.links()).render(digest, fmt),
    )


async def _post_and_print(config: Config, deliver: Callable[[ChannelPoster], Awaitable[str]], printed: str) -> int:
    """Run ``deliver`` on the channel poster, say each chat's outcome on stderr, print ``printed`` (the answer).

    The state file or the channel unusable: nothing was claimed or sent, one line says why, and the answer is still
    printed when the channel was the problem.
    """
    # SIGTERM (a Job's deadline, a node drain): the deliveries are cancelled, which releases their claims at once.
    task = asyncio.current_task()
    if task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        async with channel_poster(config) as post:
            account = await deliver(post)
    except asyncio.CancelledError:
        print("digest: interrupted (SIGTERM): what was not posted is posted by the next run", file=sys.stderr)
        return EXIT_FAILED
    except StateError as exc:
        print(f"digest: DIGEST_STATE_PATH: {exc}", file=sys.stderr)
        return for_state_error(exc)
    except DeliveryError as exc:
        print(f"digest: not posted: {exc}", file=sys.stderr)
        sys.stdout.write(printed)
        return EXIT_USAGE if exc.permanent else EXIT_FAILED
    for line in account.split("; "):
        print(f"digest: {line}", file=sys.stderr)
    sys.stdout.write(printed)
    return _exit_code(post)


def _exit_code(post: ChannelPoster) -> int:
    """1 when a retry could help (a transient failure), else 2 when a chat refused for good, else 0."""
    if post.failures:
        return EXIT_FAILED
    return EXIT_USAGE if post.permanent_failures else EXIT_OK


async def post_week(config: Config, year: int, week: int, fmt: str, chart: Path | None = None) -> int:
    """`digest run --week W --post`: the week at a glance, posted once per chat and week (the weekly post's key)."""
    from digest.output.week_chart import render_week_chart, week_caption

    store = open_history_store(config.settings)
    try:
        summary = await make_week(config, year, week, store)
    finally:
        if store is not None:
            store.close()
    photo = None
    if chart is not None:
        await asyncio.to_thread(render_week_chart, summary, chart)
        photo = Photo(png=await asyncio.to_thread(chart.read_bytes), caption=week_caption(summary))

    async def draw() -> Photo | None:
        """The week's chart, for the posts of this run (drawn only when one is still owed)."""
        try:
            with tempfile.TemporaryDirectory(prefix="digest-chart-") as folder:
                path = Path(folder) / "week.png"
                await asyncio.to_thread(render_week_chart, summary, path)
                return Photo(png=await asyncio.to_thread(path.read_bytes), caption=week_caption(summary))
        except Exception:  # a chart is a bonus: the week goes out without it rather than not at all
            log.exception("could not draw the chart of %s; posting without it", summary.label)
            return None

    drawing = draw if photo is None and config.settings.telegram_chart else None

    async def deliver(post: ChannelPoster) -> str:
        return await post.post_text(
            weekly_key(year, week), summary.label, lambda fmt: post.renderer.render_week(summary, fmt), photo, drawing
        )

    return await _post_and_print(config, deliver, printed=Renderer().render_week(summary, fmt))


async def replay_and_post(config: Config, days: list[date], fmt: str, concurrency: int) -> int:
    """`digest replay --post`: every day's digest, each posted once per recipient."""
    try:
        async with channel_poster(config) as post:
            await replay(config, days, fmt, concurrency, sys.stdout, sys.stderr, post)
    except StateError as exc:
        print(f"digest: DIGEST_STATE_PATH: {exc}", file=sys.stderr)
        return for_state_error(exc)
    except DeliveryError as exc:
        # Nothing was claimed or sent; the days are still replayed and printed.
        print(f"digest: not posted: {exc}", file=sys.stderr)
        await replay(config, days, fmt, concurrency, sys.stdout, sys.stderr)
        return EXIT_USAGE if exc.permanent else EXIT_FAILED
    return _exit_code(post)
