"""Slack's Web API as the digest uses it: a call that returns Slack's answer or raises one `DeliveryError`.

Everything Slack (or what stands in its place) answers is translated here, once:

- HTTP 429: retried after its ``Retry-After`` (Slack sends one with every 429; 30 s when it does not); a 5xx, a
  timeout or a refused connection: retried with capped exponential backoff and jitter inside `RetryPolicy`'s budget;
- ``{"ok": false, "error": …}``: transient for Slack's own troubles (``internal_error``, ``fatal_error``,
  ``service_unavailable``, ``request_timeout``, ``ratelimited``), permanent for everything else — a channel not found,
  the bot not in it, a revoked or wrong token, a missing scope, an archived channel: sending again cannot help, and
  an unknown code is said as it is rather than retried forever;
- an answer that is not the Web API's (an HTML page, JSON without ``ok``): transient, said as such.

A call whose answer was lost after it was sent (a read timeout, a connection cut mid-answer) may have been taken:
the once-protocol's `SendGuard` counts it, so a message is repeated once at most and a chart never.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from digest.channels.http import Answer, HttpSender, plain_reader
from digest.channels.once import SendGuard
from digest.channels.retry import RetryPolicy, short

log = logging.getLogger(__name__)

SLACK_API = "https://slack.com/api"
# Slack's own troubles: worth another try. Every other error code is about this request, token or channel.
TRANSIENT_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"})
# What Slack says when a 429 carries no Retry-After (its docs: wait at least a minute for the tier's window; 30 s here
# because the backoff budget is 5 minutes).
_DEFAULT_RETRY_AFTER = 30.0


@dataclass
class SlackApi:
    """Calls Slack Web API methods with a bot token; retries what a retry can fix."""

    client: httpx.AsyncClient
    token: str
    api_url: str = SLACK_API
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    random_unit: Callable[[], float] = random.random
    wall_clock: Callable[[], float] = time.time

    async def call(
        self,
        method: str,
        payload: Mapping[str, Any],
        guard: SendGuard | None = None,
        form: bool = False,
    ) -> dict[str, Any]:
        """Slack's answer to ``method`` (``ok`` true), after the retries; `DeliveryError` otherwise.

        ``form``: send the arguments form-encoded (the files upload methods take no JSON body).
        """
        url = f"{self.api_url.rstrip('/')}/{method}"
        headers = {"Authorization": f"Bearer {self.token}"}
        return await self.send(url, method, guard, headers=headers, payload=payload, form=form)

    async def send(
        self,
        url: str,
        what: str,
        guard: SendGuard | None,
        headers: Mapping[str, str] | None = None,
        payload: Mapping[str, Any] | None = None,
        form: bool = False,
        content: bytes | None = None,
        web_api: bool = True,
    ) -> dict[str, Any]:
        """POST to ``url`` with the retries above; ``web_api``: the answer is the Web API's JSON with ``ok``.

        Without ``web_api`` (an incoming webhook, a file's upload URL) a 2xx is success and its body is returned as
        ``{"body": text}``; any other 4xx than 408 and 429 is permanent.
        """
        request: dict[str, Any] = {"headers": dict(headers or {})}
        if content is not None:
            request["content"] = content
        elif form:
            given = (payload or {}).items()
            request["data"] = {key: value if isinstance(value, str) else json.dumps(value) for key, value in given}
        else:
            request["json"] = dict(payload or {})
        http = HttpSender(
            self.client, "Slack", self.retry, self.sleep, self.random_unit, self.wall_clock, _DEFAULT_RETRY_AFTER
        )
        return await http.post(url, what, guard, _web_api_answer if web_api else _PLAIN, **request)


_PLAIN = plain_reader("Slack")


def _web_api_answer(status: int, body: bytes) -> Answer:
    """Slack's Web API answer, or (permanent, why) when it was not taken."""
    text = body.decode("utf-8", "replace")
    if status == 429 or status == 408 or status >= 500:
        return _PLAIN(status, body)
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "ok" not in answer:
        # A proxy's page, a redirect: not Slack's answer; a later try may reach it.
        return False, f"not the Slack Web API's answer (HTTP {status}): {short(text) or 'empty'}"
    if answer["ok"] is True:
        return answer
    error = str(answer.get("error", "unknown_error"))
    if error in TRANSIENT_ERRORS:
        return False, f"Slack said {error}"
    return True, f"refused by Slack: {error}"
