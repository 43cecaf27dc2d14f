"""The `digest` command: `digest run` grades one window against your backends, `digest demo` shows it working.

Exit codes: 0 whenever a digest was produced (even a CRITICAL or UNKNOWN one — the digest *is* the answer),
2 for bad configuration or arguments (one line naming the problem, no traceback), 1 when no digest could be made
at all (the demo's backends could not start).

This module and the scheduler are the only places that read the clock.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from checks.contract import Sources, Window
from digest.collect import build_checks, collect
from digest.policy import Policy, PolicyError, load_policy
from digest.render import FORMATS, Renderer
from digest.score import Digest, grade
from digest.settings import ConfigError, Settings, load_settings
from digest.sources import PrometheusSource, VictoriaLogsSource
from digest.window import WindowError, day_window, last_window, parse_date, parse_duration, parse_moment

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
DEMO_DAY = "2026-07-20"

log = logging.getLogger("digest")


@dataclass(frozen=True)
class Config:
    """Settings and policy, read once at start and passed down."""

    settings: Settings
    policy: Policy


def load_config() -> Config:
    """Settings from the environment, then the policy file they name; `ConfigError` names what is wrong."""
    settings = load_settings()
    try:
        policy = load_policy(settings.policy_file)
    except PolicyError as exc:
        raise ConfigError(f"DIGEST_POLICY_FILE: {exc}") from None
    return Config(settings=settings, policy=policy)


async def make_digest(config: Config, window: Window) -> Digest:
    """Query the backends for ``window`` and grade it. Never raises for a backend failure."""
    settings = config.settings
    metrics = PrometheusSource(settings.vm_endpoint())
    logs = VictoriaLogsSource(settings.vl_endpoint())
    try:
        sources = Sources(metrics=metrics, logs=logs)
        # A check's deadline leaves room for its few sequential queries, each bounded by the query timeout.
        collected = await collect(
            build_checks(config.policy), sources, window, config.policy, deadline_seconds=settings.query_timeout * 4
        )
    finally:
        await metrics.aclose()
        await logs.aclose()
    return grade(settings.cluster, window, collected.findings, collected.disabled, config.policy)


def window_from_args(args: argparse.Namespace, settings: Settings, now: datetime) -> Window:
    """The window the arguments ask for; ``now`` is the caller's clock."""
    zone = settings.zone
    if args.date is not None:
        return day_window(parse_date(args.date), zone)
    span = parse_duration(args.last or "24h")
    at = parse_moment(args.at) if args.at else now
    return last_window(span, at, zone)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="digest",
        description="Daily cluster health digest from VictoriaMetrics and VictoriaLogs, graded on 10 points.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log queries and timings to stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="grade one window (a calendar day, or the last N hours)")
    which = run.add_mutually_exclusive_group()
    which.add_argument("--date", metavar="YYYY-MM-DD", help="that calendar day in DIGEST_TIMEZONE")
    which.add_argument("--last", metavar="DURATION", help="a window ending at --at or now, e.g. 24h (default), 6h")
    run.add_argument("--at", metavar="RFC3339", help="end of a --last window, e.g. 2026-07-21T12:00:00Z")
    run.add_argument("--format", choices=FORMATS, default="text", help="output format (default text)")

    demo = commands.add_parser("demo", help=f"load {DEMO_DAY} into embedded backends and print its digest")
    demo.add_argument("--format", choices=FORMATS, default="text", help="output format (default text)")
    demo.add_argument("--date", metavar="YYYY-MM-DD", default=DEMO_DAY, help="a corpus day (default %(default)s)")
    return parser


def _fail(message: str) -> int:
    print(f"digest: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `digest` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every request URL at INFO; URLs are not secret here but stay quiet unless asked.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.command == "demo":
        return _demo(args)
    if args.at and args.date:
        return _fail("--at goes with --last, not --date")
    try:
        config = load_config()
    except ConfigError as exc:
        return _fail(str(exc))
    try:
        window = window_from_args(args, config.settings, datetime.now(UTC))
    except WindowError as exc:
        return _fail(str(exc))
    digest = asyncio.run(make_digest(config, window))
    sys.stdout.write(Renderer().render(digest, args.format))
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    from digest.corpus import day as corpus_day
    from digest.embedded import EmbeddedBackends, EmbeddedError, load_corpus_day

    try:
        incident = corpus_day(parse_date(args.date))
    except (WindowError, KeyError) as exc:
        return _fail(str(exc).strip("'\""))
    try:
        with EmbeddedBackends() as backends:
            print(
                f"digest demo: loading {incident.date} ({incident.title}) into VictoriaMetrics and VictoriaLogs "
                f"on 127.0.0.1:{backends.metrics.port} and :{backends.logs.port}…",
                file=sys.stderr,
            )
            load_corpus_day(backends, incident)
            settings = load_settings(
                vm_url=backends.metrics.url,
                vl_url=backends.logs.url,
                cluster="homelab",
                timezone="UTC",
                policy_file=None,
            )
            config = Config(settings=settings, policy=Policy())
            digest = asyncio.run(make_digest(config, day_window(incident.date, settings.zone)))
    except EmbeddedError as exc:
        print(f"digest demo: {exc}", file=sys.stderr)
        return EXIT_FAILED
    sys.stdout.write(Renderer().render(digest, args.format))
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
