"""Mattermost as a `digest.channels.channel.Channel`: by a bot account's token, or by incoming webhooks (text only).

**Bot token** (a bot account's access token; the bot added to each channel): each recipient is a channel id (26
characters). A digest is one post of Markdown (more past 16,000 characters), ``POST /api/v4/posts``; the chart
follows as a post of its own with the file attached (``POST /api/v4/files`` with the channel id, then the post with
``file_ids`` and the caption as its message).

**Incoming webhooks** (``DIGEST_MATTERMOST_WEBHOOK_URLS``, name=URL pairs): the same Markdown as ``{"text": …}``, no
chart — a webhook cannot attach a file.

Errors: 401 (the token), 403 (the bot is not in the channel, or may not post), 404 (no such channel) and any other
4xx are permanent; 429 waits its ``Retry-After`` (30 s without one), 5xx and timeouts are retried
(`digest.channels.http.HttpSender`). Mattermost's error answers carry a ``message``; it is what the failure says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from digest.channels.channel import DeliveryError
from digest.channels.http import Answer, HttpSender, plain_reader
from digest.channels.mattermost.markdown import from_html, posts_of
from digest.channels.once import ExactlyOnce, PartsChannel, SendGuard
from digest.channels.retry import short
from digest.channels.state import Part, PartKind

MATTERMOST = "mattermost"
_PLAIN = plain_reader("Mattermost")


def api_answer(status: int, body: bytes) -> Answer:
    """Mattermost's REST answer: its JSON when taken, else (permanent, its ``message``)."""
    if status == 429 or status == 408 or status >= 500:
        return _PLAIN(status, body)
    try:
        answer = json.loads(body or b"{}")
    except ValueError:
        answer = None
    if 200 <= status < 300:
        if isinstance(answer, dict):
            return answer
        return False, f"not Mattermost's answer (HTTP {status}): {short(body.decode('utf-8', 'replace')) or 'empty'}"
    said = answer.get("message") if isinstance(answer, dict) else None
    if not isinstance(said, str) or not said:
        return _PLAIN(status, body)
    return True, f"refused by Mattermost: HTTP {status}: {short(said)}"


@dataclass(frozen=True)
class MattermostApi:
    """The REST API v4 of one server, with a bot's token."""

    http: HttpSender
    server_url: str
    token: str

    def _url(self, path: str) -> str:
        return f"{self.server_url.rstrip('/')}/api/v4/{path}"

    @property
    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def post(
        self, channel_id: str, message: str, guard: SendGuard | None, file_ids: list[str] | None = None
    ) -> str:
        """Post ``message`` (and files) in the channel; the post's id."""
        payload: dict[str, Any] = {"channel_id": channel_id, "message": message}
        if file_ids:
            payload["file_ids"] = file_ids
        answer = await self.http.post(self._url("posts"), "post", guard, api_answer, json=payload, headers=self._auth)
        return str(answer.get("id", ""))

    async def upload(self, channel_id: str, filename: str, data: bytes) -> str:
        """Upload a file to the channel (shown only once a post names it); its id."""
        answer = await self.http.post(
            self._url("files"),
            "chart upload",
            None,
            api_answer,
            data={"channel_id": channel_id},
            files={"files": (filename, data, "image/png")},
            headers=self._auth,
        )
        infos = answer.get("file_infos")
        if not isinstance(infos, list) or not infos or not isinstance(infos[0], dict) or "id" not in infos[0]:
            raise DeliveryError("Mattermost answered no file id for the chart", permanent=False)
        return str(infos[0]["id"])


@dataclass(frozen=True)
class MattermostParts:
    """`digest.channels.once.PartWriter` of a bot token: posts, and the chart as a post with its file."""

    api: MattermostApi

    def texts(self, message: str) -> list[str]:
        return posts_of(from_html(message))

    async def send(self, address: str, part: Part, guard: SendGuard, reply_to: int | None = None) -> tuple[str, int]:
        if part.kind is PartKind.TEXT:
            await self.api.post(address, part.text, guard)
            return address, 0
        if part.data is None:
            raise DeliveryError("the stored chart has no image", permanent=True)
        # The upload shows nothing until a post names it: only that post is counted by the guard.
        file_id = await self.api.upload(address, part.filename or "digest.png", part.data)
        await self.api.post(address, part.text, guard, [file_id])
        return address, 0


@dataclass(frozen=True)
class MattermostWebhookParts:
    """`digest.channels.once.PartWriter` of incoming webhooks: ``{"text": markdown}`` to the recipient's URL."""

    http: HttpSender
    endpoints: Mapping[str, str]

    def texts(self, message: str) -> list[str]:
        return posts_of(from_html(message))

    async def send(self, address: str, part: Part, guard: SendGuard, reply_to: int | None = None) -> tuple[str, int]:
        if part.kind is not PartKind.TEXT:
            raise DeliveryError("an incoming webhook cannot post a chart", permanent=True)
        url = self.endpoints.get(address)
        if url is None:
            raise DeliveryError(f"no URL is configured for Mattermost webhook {address}", permanent=True)
        await self.http.post(url, f"webhook {address}", guard, _PLAIN, json={"text": part.text})
        return address, 0


def mattermost_channel(
    once: ExactlyOnce, api: MattermostApi, channel_ids: tuple[str, ...], chart: bool = True
) -> PartsChannel:
    """Mattermost channels posted to with a bot token; the chart too when ``chart``.

    Its format is the HTML Telegram gets, converted to Markdown by the writer, so the sections are Telegram's.
    """
    return PartsChannel(MATTERMOST, "Mattermost", once, channel_ids, lambda _key: MattermostParts(api), chart=chart)


def mattermost_webhook_channel(once: ExactlyOnce, http: HttpSender, endpoints: Mapping[str, str]) -> PartsChannel:
    """Mattermost incoming webhooks by name (name → URL, a secret): the digest's Markdown, never a chart."""
    return PartsChannel(
        MATTERMOST, "Mattermost", once, tuple(endpoints), lambda _key: MattermostWebhookParts(http, endpoints)
    )
