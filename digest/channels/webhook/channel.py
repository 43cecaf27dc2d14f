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

from digest.channels.channel import DeliveryError, Photo, PostResult
from digest.channels.once import ExactlyOnce, SendGuard
from digest.channels.retry import Attempts, RetryPolicy, retry_after, short
from digest.channels.state import DeliveryState, Part, PartKind
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
        """POST ``body`` to ``url`` (the recipient ``name``) until it is taken; the answer's status."""
        attempts = Attempts(self.retry, self.sleep, self.random_unit)
        while True:
            if guard is not None and not await guard.begin():
                raise DeliveryError(
                    "may have arrived: an earlier post went unanswered (answer lost, or the process stopped while "
                    "waiting); not sent again, so that it is not repeated",
                    permanent=False,
                    unconfirmed=True,
                )
            timestamp = int(self.wall_clock())
            headers = {
                "Content-Type": "application/json",
                SIGNATURE_HEADER: sign(self.secret, timestamp, body),
                DELIVERY_HEADER: key,
            }
            try:
                async with self.client.stream("POST", url, content=body, headers=headers) as response:
                    status = response.status_code
                    said = await _start_of(response) if status >= 300 else ""
                    wait = retry_after(response.headers.get("Retry-After"), self.wall_clock())
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.WriteTimeout) as exc:
                # Nothing reached the receiver: the post was not taken.
                if guard is not None:
                    await guard.refused()
                delay, reason = attempts.backoff(), f"{type(exc).__name__}: {short(str(exc)) or 'no answer'}"
            except httpx.TransportError as exc:
                # The post left and its answer did not come back whole: it may have arrived (the guard counts it).
                delay, reason = attempts.backoff(), f"{type(exc).__name__}: {short(str(exc)) or 'answer lost'}"
            else:
                if 200 <= status < 300:
                    return status
                if guard is not None:
                    await guard.refused()  # an answer that is not 2xx: the receiver did not take it
                reason = f"HTTP {status}{f': {said}' if said else ''}"
                if 300 <= status < 400:
                    raise DeliveryError(
                        f"redirected ({reason}): a signed post is not re-sent elsewhere; set the final URL",
                        permanent=True,
                    )
                if status in (429, 503) and wait is not None:
                    delay = wait
                elif status >= 500 or status in (408, 429):
                    delay = attempts.backoff()
                else:
                    raise DeliveryError(f"refused by the receiver: {reason}", permanent=True)
            await attempts.wait(delay, reason, f"webhook {name}")


async def _start_of(response: httpx.Response) -> str:
    """The start of an error answer's body, on one line (never more than `_MAX_ERROR_BODY` bytes read)."""
    kept = b""
    async for chunk in response.aiter_bytes():
        kept += chunk[: _MAX_ERROR_BODY - len(kept)]
        if len(kept) >= _MAX_ERROR_BODY:
            break
    return short(kept.decode("utf-8", "replace"))


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


@dataclass(frozen=True)
class WebhookChannel:
    """Named webhook URLs; each delivery key POSTed once to each, as JSON, signed."""

    once: ExactlyOnce
    sender: WebhookSender
    endpoints: Mapping[str, str]  # recipient name → URL (a secret)

    @property
    def name(self) -> str:
        return WEBHOOK

    @property
    def title(self) -> str:
        return "Webhook"

    @property
    def format(self) -> str:
        return "json"

    @property
    def state(self) -> DeliveryState:
        return self.once.state

    @property
    def recipients(self) -> tuple[str, ...]:
        return tuple(self.endpoints)

    async def post_once(
        self,
        recipient: str,
        key: str,
        message: Callable[[], Awaitable[str]],
        late: bool = False,
        photo: Callable[[], Awaitable[Photo | None]] | None = None,
    ) -> PostResult:
        """POST the JSON digest to the URL named ``recipient`` unless ``key`` already went there; no chart."""
        writer = WebhookParts(self.sender, self.endpoints, key)
        return await self.once.post_once(recipient, key, message, writer, late=late)
