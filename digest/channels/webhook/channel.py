"""The signed webhook channel: the JSON digest POSTed to each named URL, once per delivery key, signed, retried.

Each recipient is a name and a URL (``ops=https://hooks.example/digest``); the name is what the delivery state, the
logs and /status say — the URL is a secret (it often carries the receiver's token) and is never printed. The body is
the digest as ``digest run --format json`` prints it (``schema_version`` first), unchanged; the chart is not sent
(a receiver that wants one draws it from the JSON). Headers:

- ``X-Digest-Signature: t=<unix seconds>,v1=<hex>``: HMAC-SHA256 of ``"<t>." + body`` with ``DIGEST_WEBHOOK_SECRET``
  (`digest.channels.webhook.signature`);
- ``X-Digest-Delivery``: the delivery key (``daily:2026-07-20``, ``weekly:2026-W29``, ``window:…``), the same on
  every retry and repeat — a receiver keeps the keys it has seen and drops a repeat.

Retries (healthchecks' split of transient and permanent): a 5xx, a 408, a timeout or a refused connection is retried
with capped exponential backoff and jitter inside `RetryPolicy`'s budget, a 429 (or a 503) after its ``Retry-After``;
any other 4xx is permanent (the receiver refused this post: sending it again cannot help) and so is a redirect (a
signed body is never re-sent to wherever a 3xx points). A send whose answer was lost (a read timeout, a connection cut
mid-answer) may have arrived: the once-protocol's guard lets it go once more at most, and the receiver's
``X-Digest-Delivery`` check makes that repeat harmless; a 5xx answer counts as not taken.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import httpx

from digest.channels.channel import DeliveryError
from digest.channels.http import Answer, HttpSender
from digest.channels.once import ExactlyOnce, PartsChannel, SendGuard
from digest.channels.retry import RetryPolicy, short
from digest.channels.state import Part, PartKind
from digest.channels.webhook.signature import SIGNATURE_HEADER, sign

log = logging.getLogger(__name__)

WEBHOOK = "webhook"
DELIVERY_HEADER = "X-Digest-Delivery"
# The part of an error answer kept for its reason; the rest is not read.
_MAX_ERROR_BODY = 4096
# The message id recorded for a post: a webhook answers none.
NO_MESSAGE_ID = 0


@dataclass
class WebhookSender:
    """POSTs a signed body to a URL with retries; `DeliveryError` when it was not taken."""

    client: httpx.AsyncClient
    secret: bytes
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    random_unit: Callable[[], float] = random.random
    wall_clock: Callable[[], float] = time.time

    async def post(self, name: str, url: str, key: str, body: bytes, guard: SendGuard | None = None) -> int:
        """POST ``body`` to ``url`` (the recipient ``name``) until it is taken; the answer's status.

        The retry loop is `digest.channels.http.HttpSender`'s; what is the webhook's is the signature, made again for
        each attempt over its own timestamp, and what an answer means (`_receiver_answer`).
        """
        http = HttpSender(
            self.client, "webhook", self.retry, self.sleep, self.random_unit, self.wall_clock, default_retry_after=None
        )

        def signed() -> dict[str, str]:
            return {SIGNATURE_HEADER: sign(self.secret, int(self.wall_clock()), body)}

        headers = {"Content-Type": "application/json", DELIVERY_HEADER: key}
        answer = await http.post(url, name, guard, _receiver_answer, signed, content=body, headers=headers)
        return int(answer["status"])


def _receiver_answer(status: int, body: bytes) -> Answer:
    """A receiver's answer: 2xx taken; 429, 408 and 5xx not yet; a redirect or any other 4xx refused for good."""
    if 200 <= status < 300:
        return {"status": status}
    said = short(body[:_MAX_ERROR_BODY].decode("utf-8", "replace"))
    reason = f"HTTP {status}{f': {said}' if said else ''}"
    if status == 429 or status == 408 or status >= 500:
        return False, reason
    if 300 <= status < 400:
        return True, f"redirected ({reason}): a signed post is not re-sent elsewhere; set the final URL"
    return True, f"refused by the receiver: {reason}"


@dataclass(frozen=True)
class WebhookParts:
    """`digest.channels.once.PartWriter` of one webhook post: the JSON digest as one body, never split."""

    sender: WebhookSender
    endpoints: Mapping[str, str]
    key: str

    def texts(self, message: str) -> list[str]:
        return [message]

    async def send(self, address: str, part: Part, guard: SendGuard, reply_to: int | None = None) -> tuple[str, int]:
        if part.kind is not PartKind.TEXT:
            raise DeliveryError("a webhook post carries no chart", permanent=True)
        url = self.endpoints.get(address)
        if url is None:
            raise DeliveryError(f"no URL is configured for webhook {address}", permanent=True)
        await self.sender.post(address, url, self.key, part.text.encode(), guard)
        return address, NO_MESSAGE_ID


def webhook_channel(once: ExactlyOnce, sender: WebhookSender, endpoints: Mapping[str, str]) -> PartsChannel:
    """Named webhook URLs (name → URL, a secret); each delivery key POSTed once to each, as JSON, signed; no chart."""
    return PartsChannel(
        WEBHOOK, "Webhook", once, tuple(endpoints), lambda key: WebhookParts(sender, endpoints, key), format="json"
    )
