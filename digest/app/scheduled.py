"""`digest serve` without Telegram: the schedule alone, posting to Slack and webhooks.

Telegram's bot runs the schedule when it is a channel (its job queue, and its commands beside). Without it, this
runs the same `digest.channels.dispatch.Dispatch` — the daily post at ``DIGEST_POST_AT``, the week at a glance, the
catch-up after downtime, the five-minute recheck, the look again when another process holds a claim — on the same
scheduler the bot's job queue is (APScheduler 3's asyncio scheduler, no second kind), with the same health endpoint
and metrics (``/healthz`` ready while the scheduler runs), heartbeat, and stop: SIGTERM or SIGINT cancels the
deliveries in flight (their claims released, said in one line) and the process exits 0. No one can ask anything:
Slack and webhooks are posted to, not listened to.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped]  # APScheduler 3 has no types

from digest.app.bot import AppHooks
from digest.app.channels import open_channels
from digest.app.engine import Config, open_history_store
from digest.app.exit_codes import EXIT_OK, EXIT_USAGE, for_state_error
from digest.app.health import DigestMetrics, listen
from digest.app.service import DigestService
from digest.channels.dispatch import Dispatch
from digest.channels.schedule import Schedule
from digest.channels.state import DeliveryState
from digest.output.render import Renderer
from digest.pipeline.state import StateError

log = logging.getLogger(__name__)

RECHECK_EVERY_SECONDS = 300.0
_RETRY_JOB = "claim-retry"
# How long a stop waits for the rounds under way to end (Kubernetes gives the pod 30 s before SIGKILL).
_STOP_GRACE_SECONDS = 10.0
# A late post is still owed: APScheduler must never drop a run that starts late, and runs that piled up are one.
_LATE_OK = {"misfire_grace_time": None, "coalesce": True, "max_instances": 1}


def serve_channels(config: Config, owner: str) -> int:
    """Run the schedule for the channels of DIGEST_CHANNELS (none of them Telegram) until SIGTERM or SIGINT."""
    settings = config.settings
    sockets: list[socket.socket] = []
    if settings.health_port:
        try:
            sockets = listen(settings.health_port)
        except OSError as exc:
            print(
                f"digest: DIGEST_HEALTH_PORT: port {settings.health_port} cannot be opened: {exc.strerror}",
                file=sys.stderr,
            )
            return EXIT_USAGE
    try:
        return asyncio.run(_serve(config, owner, sockets))
    except StateError as exc:
        print(f"digest: DIGEST_STATE_PATH: {exc}", file=sys.stderr)
        return for_state_error(exc)


async def _serve(config: Config, owner: str, sockets: list[socket.socket]) -> int:
    settings = config.settings
    store = open_history_store(settings)
    state = DeliveryState(settings.state_path, owner)
    service = DigestService(config, renderer=Renderer(settings.links()), metrics=DigestMetrics(), history_store=store)
    hooks = AppHooks(config=config, state=state, service=service, health_sockets=sockets)
    wall = datetime.strptime(settings.post_at, "%H:%M").time()
    schedule = Schedule(settings.zone, wall, timedelta(hours=settings.late_grace_hours), settings.weekly_post_day)
    scheduler = AsyncIOScheduler(timezone=settings.zone)
    stopped = asyncio.Event()
    # The rounds running now: a stop lets them end (their deliveries cancelled, claims released) before the loop does.
    rounds: set[asyncio.Task[object]] = set()
    try:
        async with open_channels(settings, owner) as channels:
            dispatch = Dispatch(schedule=schedule, digests=service, channels=channels, hooks=hooks)

            async def round_of_posts() -> None:
                task = asyncio.current_task()
                if task is not None:
                    rounds.add(task)
                try:
                    await dispatch.post_all_due()
                except asyncio.CancelledError:
                    # The stop ended it (what was not posted is posted by the next run): one line, no traceback
                    # from the scheduler's executor, and the job ends here rather than re-raising into it.
                    log.info("a scheduled round was interrupted by the stop")
                except Exception:  # one round's failure is logged; the next round (5 min) tries again
                    log.exception("a scheduled round failed")
                finally:
                    if task is not None:
                        rounds.discard(task)

            def look_again(delay: float) -> None:
                when = datetime.now(UTC) + timedelta(seconds=delay)
                scheduler.add_job(
                    round_of_posts, "date", run_date=when, id=_RETRY_JOB, replace_existing=True, **_LATE_OK
                )

            dispatch.look_again = look_again
            scheduler.add_job(
                round_of_posts, "cron", hour=wall.hour, minute=wall.minute, timezone=settings.zone, **_LATE_OK
            )
            first = datetime.now(UTC) + timedelta(seconds=0.5)
            scheduler.add_job(
                round_of_posts, "interval", seconds=RECHECK_EVERY_SECONDS, next_run_time=first, **_LATE_OK
            )
            loop = asyncio.get_running_loop()

            def stop() -> None:
                if stopped.is_set():
                    return
                abandoned = dispatch.stop()
                log.info("stopping: %d delivery(ies) in flight are abandoned and will be retried", abandoned)
                stopped.set()

            for signal_number in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signal_number, stop)
            scheduler.start()
            await hooks.started(
                lambda: bool(scheduler.running) and not stopped.is_set(),
                lambda: None if scheduler.running else "the scheduler is not running",
            )
            recipients = ", ".join(f"{len(one.recipients)} on {one.name}" for one in channels)
            log.info("scheduler ready; posting at %s %s to %s", settings.post_at, settings.zone, recipients)
            await stopped.wait()
            scheduler.shutdown(wait=False)
            # The rounds under way end on their own once their deliveries are cancelled ("interrupted"); a round
            # still computing its digest is given a few seconds, then cancelled too.
            if rounds:
                _, pending = await asyncio.wait(set(rounds), timeout=_STOP_GRACE_SECONDS)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
            await hooks.stopped()
    finally:
        state.close()
        if store is not None:
            store.close()
    return EXIT_OK
