"""The `digest` command: `digest run` grades one window against your backends, `digest demo` shows it working.

Exit codes, the same for every subcommand (the README's "Exit codes" table; `digest.app.serve` uses these constants):
0 when the digest was made (even a CRITICAL or UNKNOWN one — the digest *is* the answer) and posted if asked;
1 when a delivery failed, or no digest could be made at all (the demo's backends could not start); 2 for bad
configuration, bad arguments or an unusable state file — one line naming the problem, never a traceback. The state
file is opened before anything is computed, so `run --post` and `serve` refuse a corrupt one alike.

This module and the scheduler are the only places that read the clock.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NoReturn

from digest import __version__
from digest.app.console_script import raise_young_threshold
from digest.app.engine import Config, load_config, make_chart, make_digest, open_history_store, stored_history
from digest.app.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE, for_state_error
from digest.app.logs import configure_logging
from digest.app.settings import ConfigError, Settings, load_settings
from digest.channels.schedule import last_scheduled_day
from digest.checks.contract import Window
from digest.output.render import FORMATS, Renderer, headline, most_said, unseen_spans
from digest.pipeline.policy import Policy
from digest.pipeline.score import Digest
from digest.pipeline.window import (
    WindowError,
    as_asked,
    day_window,
    last_window,
    parse_date,
    parse_duration,
    parse_moment,
)

DEMO_DAY = "2026-07-20"


def scheduled_post(settings: Settings, now: datetime) -> tuple[str, Window]:
    """The delivery key and window of the most recent scheduled daily post at or before ``now``.

    The bot's own: the same key and window whoever posts it (the bot, a CronJob, its retries, a rerun), so a day is
    posted once per chat however many of them run.
    """
    scheduled = last_scheduled_day(now, settings.post_time.replace(tzinfo=None), settings.zone)
    return scheduled.key, scheduled.window


def _daily_by_default(args: argparse.Namespace) -> bool:
    """Whether `run --post` was given the daily window by default: no --date, no --at, no --last but 24 h."""
    if args.scheduled or args.date is not None or args.at is not None:
        return False
    try:
        return args.last is None or parse_duration(args.last) == timedelta(hours=24)
    except WindowError:
        return False  # said as a usage error by window_from_args


def window_from_args(args: argparse.Namespace, settings: Settings, now: datetime) -> Window:
    """The window --date or --last (and --at) ask for; ``now`` is the caller's clock (--scheduled: `scheduled_post`)."""
    zone = settings.zone
    if args.date is not None:
        return as_asked(day_window(parse_date(args.date), zone), now)
    span = parse_duration("24h" if args.last is None else args.last)
    at = now if args.at is None else parse_moment(args.at)
    return as_asked(last_window(span, at, zone), now)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="digest",
        description="Daily cluster health digest from VictoriaMetrics and VictoriaLogs, graded on 10 points.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log queries and timings to stderr")
    parser.add_argument("--version", action="version", version=f"digest {__version__}")
    # -v after the subcommand too (`digest run -v`): SUPPRESS keeps the one given before it when this one is not.
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log queries and timings to stderr"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="grade one window (a calendar day, or the last N hours)", parents=[verbose])
    which = run.add_mutually_exclusive_group()
    which.add_argument("--date", metavar="YYYY-MM-DD", help="that calendar day in DIGEST_TIMEZONE")
    which.add_argument("--last", metavar="DURATION", help="a window ending at --at or now, e.g. 24h (default), 6h")
    which.add_argument(
        "--week", metavar="YYYY-Www", help="the week at a glance: that ISO week's seven days, e.g. 2026-W33"
    )
    which.add_argument(
        "--scheduled",
        action="store_true",
        help="the last daily post's window (previous DIGEST_POST_AT to the last one); with --post, the bot's own "
        "delivery: one post per chat and day however often it runs (for a CronJob)",
    )
    run.add_argument("--at", metavar="RFC3339", help="end of a --last window, e.g. 2026-07-21T12:00:00Z")
    run.add_argument("--format", choices=FORMATS, default="text", help="output format (default text)")
    run.add_argument("--chart", metavar="FILE.png", help="also draw the window's chart (hourly errors, 5xx, conntrack)")
    run.add_argument(
        "--post",
        action="store_true",
        help="also post the digest to DIGEST_TELEGRAM_CHAT_IDS, once per chat and window (for a CronJob)",
    )

    commands.add_parser(
        "serve", help="run the Telegram bot: the daily post, /digest, /status, /help", parents=[verbose]
    )

    replay = commands.add_parser(
        "replay", help="one digest per calendar day over a range of past days", parents=[verbose]
    )
    replay.add_argument("--from", dest="first", metavar="YYYY-MM-DD", required=True, help="first day")
    replay.add_argument("--to", dest="last_day", metavar="YYYY-MM-DD", required=True, help="last day (inclusive)")
    replay.add_argument(
        "--format",
        choices=("summary", "text", "json"),
        default="summary",
        help="summary: one line per day (default); text: each full digest; json: JSON lines, summaries on stderr",
    )
    replay.add_argument("--concurrency", type=_count, default=2, help="days computed at once (default 2)")
    replay.add_argument("--post", action="store_true", help="post each day's digest once per chat")

    doctor = commands.add_parser(
        "doctor",
        help="what answers at each URL, the usual mistakes, what each check finds (exit 2: a graded one cannot run)",
        parents=[verbose],
    )
    doctor.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    doctor.add_argument("--at", metavar="RFC3339", help="read the checks on the 24 h ending then (default: now)")

    rules = commands.add_parser(
        "rules",
        help="print the recording rules that count the log lines every minute, for vmalert or Loki's ruler",
        parents=[verbose],
    )
    rules.add_argument("--for", dest="evaluator", choices=("vmalert", "loki"), required=True, help="the rule evaluator")
    rules.add_argument(
        "--replay",
        action="store_true",
        help="vmalert only: the rules for `vmalert -replay` over past days (their minutes stamped at the start)",
    )

    ack = commands.add_parser(
        "ack",
        help="ack a finding you own (it shows on one line and costs no point until it expires or gets worse), "
        "or list the acks",
        parents=[verbose],
    )
    ack.add_argument("target", nargs="?", metavar="CHECK[:SUBJECT]", help="e.g. error_lines:feeds/feed-aggregator")
    ack.add_argument("--for", dest="duration", default="7d", metavar="DURATION", help="12h, 7d, 2w (default 7d)")
    ack.add_argument("--reason", default="", help="why it is known and owned, shown beside it")
    ack.add_argument("--by", default="", help="who acks (default: $USER)")
    ack.add_argument("--list", action="store_true", help="list the acks that hold now")
    unack = commands.add_parser("unack", help="end an ack now", parents=[verbose])
    unack.add_argument("target", metavar="CHECK[:SUBJECT]")

    demo = commands.add_parser(
        "demo", help=f"load {DEMO_DAY} into embedded backends and print its digest", parents=[verbose]
    )
    demo.add_argument("--format", choices=FORMATS, default="text", help="output format (default text)")
    demo.add_argument("--date", metavar="YYYY-MM-DD", default=DEMO_DAY, help="a corpus day (default %(default)s)")
    return parser


def _count(text: str) -> int:
    """An argparse type: a whole number in ASCII digits (``int()`` would also read "٣" as 3)."""
    if not (text.isascii() and text.strip().isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


def _state_problem(settings: Settings) -> int | None:
    """The exit code if the state file cannot be used (said in one line), or None; asked before computing."""
    from digest.channels.state import DeliveryState
    from digest.pipeline.state import StateError

    try:
        DeliveryState(settings.state_path, owner="digest-cli-check").close()
    except StateError as exc:
        print(f"digest: DIGEST_STATE_PATH: {exc}", file=sys.stderr)
        return for_state_error(exc)
    return None


def _fail(message: str) -> int:
    print(f"digest: {message}", file=sys.stderr)
    return EXIT_USAGE


def tune_garbage_collection() -> None:
    """Make the cyclic garbage collector cheap for a process that parses large answers.

    A backend's answer of ~30,000 rows (a day's nodes × buckets) is ~100,000 dicts and lists, all alive until the
    answer is folded: with CPython's defaults they survive the young collections, are promoted, and trigger full
    collections that walk every object of the process again. Collecting the young generation after 100,000
    allocations instead of 700 lets such answers die young, and freezing what the imports made keeps the collector
    from walking the modules. An 8-day replay of the benchmark's 200-node cluster (`python -m bench.gc_cost --from
    2026-07-12 --to 2026-07-19 --repeats 3`, docs/benchmarks-history.md, "Replay against its floor, after 6c539a6"),
    medians: CPython's defaults 6.07 CPU-seconds, of which the collector 1.66 s (28 full collections); this tuning
    4.95, of which 0.14 s (none full). At 10,000 the collector still took 0.36-0.48 s. The process's garbage is mostly
    acyclic (freed by reference counting), so memory stays where it was (93 MB peak in both).
    """
    gc.freeze()
    raise_young_threshold()


def main(argv: Sequence[str] | None = None, exit_when_done: Callable[[int], NoReturn] | None = None) -> int:
    """Entry point of the `digest` console script.

    ``exit_when_done`` ends the process when a `digest run` has written its digest or posted it (the console
    script's `exit_now`, which skips the interpreter's teardown); None returns the exit code, as tests need.
    """

    def done(code: int) -> int:
        if exit_when_done is not None:
            exit_when_done(code)
        return code

    tune_garbage_collection()
    parser = _parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    if args.command == "demo":
        return _demo(args)
    if args.command == "run" and args.at and (args.date or args.week or args.scheduled):
        other = "date" if args.date else "week" if args.week else "scheduled"
        return _fail(f"--at goes with --last, not --{other}")
    try:
        config = load_config()
        delivers = args.command == "serve" or getattr(args, "post", False)
        # Each channel's settings are checked before anything runs: a missing token or URL is one line, exit 2.
        token = config.settings.require_telegram() if delivers and "telegram" in config.settings.channels else None
        if delivers:
            from digest.app.channels import check_channels

            check_channels(config.settings)
    except ConfigError as exc:
        return _fail(str(exc))
    # Secrets are known now: every later log line goes through the redacting formatter.
    configure_logging(args.verbose, config.settings.secrets())
    if args.command == "serve":
        from digest.app.serve import owner, serve

        if "telegram" not in config.settings.channels:
            from digest.app.scheduled import serve_channels

            return serve_channels(config, owner())
        return serve(config, token or "")
    if args.command == "replay":
        return _replay(args, config)
    if args.command == "rules":
        return _rules(args, config)
    if args.command in ("ack", "unack"):
        return _ack(args, config)
    if args.command == "doctor":
        from digest.app.doctor import doctor

        try:
            at = datetime.now(UTC) if args.at is None else parse_moment(args.at)
        except WindowError as exc:
            return _fail(str(exc))
        return asyncio.run(doctor(config, at, sys.stdout, args.format))
    if args.week is not None:
        return _week(args, config)
    now = datetime.now(UTC)
    if args.post and _daily_by_default(args):
        # "The last 24 h, posted" is the daily post: keyed by its scheduled day, a retried or repeated run (a
        # CronJob's backoffLimit) finds the same delivery instead of posting a new 24 h each time.
        print(
            "digest: posting the scheduled day's digest (as --scheduled; use --at for a window ending now)",
            file=sys.stderr,
        )
        args.scheduled = True
    key: str | None = None
    try:
        if args.scheduled:
            key, window = scheduled_post(config.settings, now)
        else:
            window = window_from_args(args, config.settings, now)
    except WindowError as exc:
        return _fail(str(exc))
    chart = Path(args.chart) if args.chart else None
    if args.post:
        from digest.app.serve import post_window

        problem = _state_problem(config.settings)
        if problem is not None:
            return problem

        return done(asyncio.run(post_window(config, window, args.format, chart, key=key)))
    # The state file keeps the trends' past days when one is configured; a plain `digest run` writes no file.
    store = open_history_store(config.settings) if "state_path" in config.settings.model_fields_set else None
    try:
        digest = asyncio.run(make_digest(config, window, history=stored_history(config, store)))
    finally:
        if store is not None:
            store.close()
    if chart is not None:
        asyncio.run(
            make_chart(config, window, chart, headline(digest), unseen=unseen_spans(digest), said=most_said(digest))
        )
    sys.stdout.write(Renderer(config.settings.links()).render(digest, args.format))
    return done(EXIT_OK)


def _ack(args: argparse.Namespace, config: Config) -> int:
    """`digest ack TARGET` / `--list` / `digest unack TARGET`: the bot's /ack, /acks and /unack, from a shell."""
    from digest.app.acks import AckDesk

    problem = _state_problem(config.settings)
    if problem is not None:
        return problem
    now = datetime.now(UTC)

    async def digest_of(window: Window) -> Digest:
        return await make_digest(config, window)

    desk = AckDesk(config, digest_of)
    if args.command == "unack":
        print(asyncio.run(desk.unack([args.target], now)))
        return EXIT_OK
    if args.list:
        if args.target:
            return _fail("ack --list takes no CHECK")
        print(asyncio.run(desk.listing(now)))
        return EXIT_OK
    if not args.target:
        return _fail("ack needs CHECK[:SUBJECT] (or --list)")
    by = args.by or os.environ.get("USER") or "cli"
    words = [args.target, args.duration, *args.reason.split()]
    answer = asyncio.run(desk.ack(words, by, now))
    print(answer)
    return EXIT_OK if answer.startswith("Acked ") else EXIT_USAGE


def _rules(args: argparse.Namespace, config: Config) -> int:
    """`digest rules --for vmalert|loki`: the policy's recording rules as a rule file on stdout."""
    from digest.backends.loki import LogqlWriter
    from digest.backends.recording_rules import dump, loki_rules, vmalert_rules
    from digest.backends.victorialogs import LogsqlWriter
    from digest.pipeline.recording import recording_plan

    if args.replay and args.evaluator != "vmalert":
        return _fail("--replay goes with --for vmalert (Loki's ruler cannot evaluate the past)")
    settings, policy = config.settings, config.policy
    fields = policy.logs.role_fields()
    plan = recording_plan(policy, settings.logs_scope)
    if not plan.families:
        return _fail("no log check is enabled in the policy: there is nothing to record")
    if args.evaluator == "vmalert":
        document = vmalert_rules(plan, LogsqlWriter(fields, settings.logs_scope), replay=args.replay)
    else:
        document = loki_rules(plan, LogqlWriter(fields, settings.logs_scope))
    sys.stdout.write(dump(document))
    return EXIT_OK


def _week(args: argparse.Namespace, config: Config) -> int:
    """`digest run --week 2026-W33`: the week at a glance, from the state file's days and the backends'."""
    from digest.app.engine import make_week
    from digest.pipeline.week import parse_iso_week, week_days

    try:
        year, week = parse_iso_week(args.week)
        last = week_days(year, week)[-1]
        ends = day_window(last, config.settings.zone).end
    except WindowError as exc:
        return _fail(str(exc))
    if ends > datetime.now(UTC):
        return _fail(f"week {args.week} is not over yet: its last day is {last}")
    chart = Path(args.chart) if args.chart else None
    if args.post:
        from digest.app.serve import post_week

        problem = _state_problem(config.settings)
        if problem is not None:
            return problem
        return asyncio.run(post_week(config, year, week, args.format, chart))
    store = open_history_store(config.settings) if "state_path" in config.settings.model_fields_set else None
    try:
        summary = asyncio.run(make_week(config, year, week, store))
    finally:
        if store is not None:
            store.close()
    if chart is not None:
        from digest.output.week_chart import render_week_chart

        render_week_chart(summary, chart)
    sys.stdout.write(Renderer().render_week(summary, args.format))
    return EXIT_OK


def _replay(args: argparse.Namespace, config: Config) -> int:
    from digest.app.replay import days_between, run_replay

    try:
        days = days_between(parse_date(args.first), parse_date(args.last_day))
        for day in days:
            day_window(day, config.settings.zone)  # a day the clocks skipped is refused before any query
    except WindowError as exc:
        return _fail(str(exc))
    if not 1 <= args.concurrency <= 16:
        return _fail("--concurrency must be between 1 and 16")
    if args.post:
        from digest.app.serve import replay_and_post

        problem = _state_problem(config.settings)
        if problem is not None:
            return problem

        return asyncio.run(replay_and_post(config, days, args.format, args.concurrency))
    return run_replay(config, days, args.format, args.concurrency)


def _demo(args: argparse.Namespace) -> int:
    # The demo's backends and corpus are development tooling (digest.testbed, the repository's testbed/), shipped in
    # the wheel and left out of the container image.
    try:
        from digest.testbed.corpus import DAYS
        from digest.testbed.corpus import day as corpus_day
        from digest.testbed.embedded import EmbeddedBackends, EmbeddedError, load_corpus_day
    except ImportError:
        print(
            "digest: demo needs digest.testbed, which this image leaves out (install digest with pip, or from a clone)",
            file=sys.stderr,
        )
        return EXIT_USAGE

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
            # The calm day before, when the corpus has it, gives the trends something to compare with.
            before = DAYS.get(incident.date - timedelta(days=1))
            for day in (before, incident):
                if day is not None:
                    load_corpus_day(backends, day)
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
    sys.stdout.write(Renderer(config.settings.links()).render(digest, args.format))
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
