"""Making, ending and listing acks (`digest.pipeline.acks`): what `/ack`, `/unack`, `/acks` and `digest ack` do.

An ack is taken against the last 24 h's digest (the same computation as `/digest`), so that it remembers the finding
as it was when acked — its value and its significant subjects — and a worse day lifts it. The acks live in the state
file (`digest.pipeline.ack_store`), shared by the bot and the CLI; the policy's exceptions are listed beside them.
Every answer is one short plain text for a person; the store is only touched off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta

from digest.app.engine import Config, policy_acks
from digest.checks.contract import Window
from digest.pipeline.ack_store import AckStore
from digest.pipeline.acks import (
    DEFAULT_DURATION,
    Ack,
    AckError,
    acked_now,
    looks_like_duration,
    parse_duration,
    parse_target,
    target_of,
)
from digest.pipeline.policy import CHECK_POLICIES
from digest.pipeline.score import Digest
from digest.pipeline.state import StateError
from digest.pipeline.window import last_window

ACK_USAGE = (
    "Usage: /ack <check>[:<subject>] [12h|7d|2w] [reason], e.g. /ack error_lines:feeds/feed-aggregator 7d "
    "retry storm, fix in PR 12 (7d by default). /unack <check>[:<subject>] ends it; /acks lists them."
)
# A reason is read on a phone beside the finding: a sentence, not a post-mortem.
MAX_REASON = 200


class AckDesk:
    """Acks for one cluster: made against the last 24 h's digest, kept in the state file."""

    def __init__(self, config: Config, digest_of: Callable[[Window], Awaitable[Digest]]) -> None:
        self._config = config
        self._digest_of = digest_of

    async def ack(self, arguments: Sequence[str], by: str, now: datetime) -> str:
        """``/ack target [duration] [reason]`` → what was acked until when, or why it was not."""
        if not arguments:
            return ACK_USAGE
        try:
            check, subject = parse_target(arguments[0], CHECK_POLICIES)
            rest = list(arguments[1:])
            duration = DEFAULT_DURATION
            if rest and looks_like_duration(rest[0]):
                duration = parse_duration(rest.pop(0))
            reason = " ".join(rest).strip()
            if len(reason) > MAX_REASON:
                raise AckError(f"a reason of at most {MAX_REASON} characters, please")
        except AckError as exc:
            return f"{exc}. {ACK_USAGE}"
        settings = self._config.settings
        window = last_window(timedelta(hours=24), now.replace(second=0, microsecond=0), settings.zone)
        digest = await self._digest_of(window)
        finding = next((one for one in digest.findings if one.name == check), None)
        if finding is None:
            return f"{check} did not run in the last 24 h (disabled, or nothing to watch here): nothing to ack."
        try:
            ack = acked_now(finding, subject, reason, by, now, now + duration, "chat")
        except AckError as exc:
            return f"{exc}."
        problem = await asyncio.to_thread(self._write, lambda store: store.put(settings.cluster, ack))
        if problem:
            return problem
        local = ack.until.astimezone(settings.zone) if ack.until is not None else None
        when = f"{local:%a %d %b %H:%M} {settings.zone}" if local is not None else "for good"
        return (
            f"Acked {ack.target} until {when}: it shows on one line and costs no point until then, unless it gets "
            "worse (a higher count or another workload)."
        )

    async def unack(self, arguments: Sequence[str], now: datetime) -> str:
        """``/unack target`` → the ack ended now, or why there was none."""
        if len(arguments) != 1:
            return ACK_USAGE
        try:
            check, subject = parse_target(arguments[0], CHECK_POLICIES)
        except AckError as exc:
            return f"{exc}. {ACK_USAGE}"
        target = target_of(check, subject)
        if any(one.target == target for one in policy_acks(self._config.policy)):
            return f"{target} is acked in the policy file: it ends there."
        ended: list[bool] = []
        settings = self._config.settings
        problem = await asyncio.to_thread(
            self._write, lambda store: ended.append(store.end(settings.cluster, target, now))
        )
        if problem:
            return problem
        return f"{target}: ack ended." if ended and ended[0] else f"{target} was not acked."

    async def listing(self, now: datetime) -> str:
        """``/acks``: the acks that hold now, each on one line, the policy's last."""
        settings = self._config.settings
        stored: list[Ack] = []
        problem = await asyncio.to_thread(self._write, lambda store: stored.extend(store.all(settings.cluster)))
        if problem:
            return problem
        live = [one for one in stored if one.since <= now and (one.until is None or now < one.until)]
        policy = [one for one in policy_acks(self._config.policy) if one.until is None or now < one.until]
        if not live and not policy:
            return "No acks. /ack <check>[:<subject>] [7d] [reason] acks a finding you own."
        lines = [f"{len(live) + len(policy)} acked:"]
        for one in live:
            until = f"until {one.until.astimezone(settings.zone):%a %d %b %H:%M}" if one.until else "for good"
            reason = f": {one.reason}" if one.reason else ""
            lines.append(f"• {one.target} by {one.by} {until}{reason}")
        for one in policy:
            until = f"until {one.until:%a %d %b}" if one.until else "for good"
            lines.append(f"• {one.target} in the policy {until}: {one.reason}")
        lines.append(f"Times in {settings.zone}.")
        return "\n".join(lines)

    def _write(self, work: Callable[[AckStore], object]) -> str:
        """Run ``work`` on the state file's acks; the one line that says why it could not, or ""."""
        try:
            store = AckStore(self._config.settings.state_path)
        except StateError as exc:
            return f"Acks are kept in the state file, which cannot be used: {exc}"
        try:
            work(store)
        except StateError as exc:
            return f"Acks are kept in the state file, which cannot be used: {exc}"
        finally:
            store.close()
        return ""
