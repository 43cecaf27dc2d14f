"""One POST to a chat service, retried until it is taken or cannot be: the loop Slack's and Mattermost's clients share.

What an answer means is the service's (`Reader`: taken, with what it said; or not, permanent or not); what is the
same everywhere is here: the `SendGuard` counted before each send (a lost answer repeats a message once at most, a
chart never), a connection never made or a request never written counted as not sent, a lost answer as maybe sent, a
429 waited out by its ``Retry-After`` (or the service's default), 5xx and timeouts by the backoff of `RetryPolicy`,
and every failure said in one line naming the service. Bodies are read up to 1 MiB: a chat API's answers are small.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from digest.channels.channel import DeliveryError
from digest.channels.once import SendGuard
from digest.channels.retry import Attempts, RetryPolicy, retry_after, short

_MAX_ANSWER_BYTES = 1024 * 1024

# What a service's answer meant: taken (what it said, parsed), or not — (permanent, why).
Answer = dict[str, Any] | tuple[bool, str]
Reader = Callable[[int, bytes], Answer]


def plain_reader(service: str) -> Reader:
    """HTTP's own meaning, for endpoints without an envelope (a webhook, an upload URL).

    2xx: taken (``{"body": text}``); 429, 408 and 5xx: not yet; a redirect: permanent (a post is never re-sent to
    wherever it points); any other 4xx: permanent, with the start of the body.
    """

    def read(status: int, body: bytes) -> Answer:
        text = short(body.decode("utf-8", "replace"))
        said = f"HTTP {status}{f': {text}' if text else ''}"
        if 200 <= status < 300:
            return {"body": body.decode("utf-8", "replace")}
        if status == 429 or status == 408 or status >= 500:
            return False, said
        if 300 <= status < 400:
            return True, f"redirected by {service} ({said}): configure the final URL"
        return True, f"refused by {service}: {said}"

    return read


@dataclass
class HttpSender:
    """POSTs with retries for one service; `DeliveryError` when the post was not taken."""

    client: httpx.AsyncClient
    service: str
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    random_unit: Callable[[], float] = random.random
    wall_clock: Callable[[], float] = time.time
    # The wait after a 429 that says no Retry-After (None: the backoff).
    default_retry_after: float | None = 30.0

    async def post(
        self,
        url: str,
        what: str,
        guard: SendGuard | None,
        read: Reader,
        fresh_headers: Callable[[], dict[str, str]] | None = None,
        **request: Any,
    ) -> dict[str, Any]:
        """POST ``request`` (httpx's ``json``, ``data``, ``content``, ``files``, ``headers``) until it is taken.

        ``fresh_headers``: headers made again for each attempt (a signature over its own timestamp).
        """
        attempts = Attempts(self.retry, self.sleep, self.random_unit)
        fixed = dict(request.pop("headers", None) or {})
        while True:
            if guard is not None and not await guard.begin():
                raise DeliveryError(
                    "may have arrived: an earlier send went unanswered (answer lost, or the process stopped while "
                    "waiting); not sent again, so that it is not repeated",
                    permanent=False,
                    unconfirmed=True,
                )
            headers = {**fixed, **(fresh_headers() if fresh_headers is not None else {})}
            try:
                async with self.client.stream("POST", url, headers=headers, **request) as response:
                    status = response.status_code
                    body = await _read(response)
                    wait = retry_after(response.headers.get("Retry-After"), self.wall_clock())
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.WriteTimeout) as exc:
                if guard is not None:
                    await guard.refused()  # nothing reached the service
                delay, reason = attempts.backoff(), f"{type(exc).__name__}: {short(str(exc)) or 'no answer'}"
            except httpx.TransportError as exc:
                delay, reason = attempts.backoff(), f"{type(exc).__name__}: {short(str(exc)) or 'answer lost'}"
            else:
                answer = read(status, body)
                if isinstance(answer, dict):
                    return answer
                if guard is not None:
                    await guard.refused()  # the service answered: not taken
                permanent, reason = answer
                if permanent:
                    raise DeliveryError(reason, permanent=True)
                if status == 429 and wait is None and self.default_retry_after is not None:
                    delay = self.default_retry_after
                elif status == 429:
                    delay = wait if wait is not None else attempts.backoff()
                else:
                    delay = wait if wait is not None and status == 503 else attempts.backoff()
            await attempts.wait(delay, reason, f"{self.service} {what}")


async def _read(response: httpx.Response) -> bytes:
    """The answer's body, at most `_MAX_ANSWER_BYTES` (a larger one is cut)."""
    kept = bytearray()
    async for chunk in response.aiter_bytes():
        kept += chunk[: _MAX_ANSWER_BYTES - len(kept)]
        if len(kept) >= _MAX_ANSWER_BYTES:
            break
    return bytes(kept)
