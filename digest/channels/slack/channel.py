"""Slack as a `digest.channels.channel.Channel`: by a bot token, or by incoming webhooks (text only).

**Bot token** (``xoxb-…``, scopes ``chat:write`` and, for the chart, ``files:write``): each recipient is a channel id
(``C0123ABCD``; a ``#name`` works for the text, the chart needs the id Slack answers with or is given). A digest is
one message of Block Kit sections (more when it passes 10 sections of 3,000 characters), posted with
``chat.postMessage`` without link unfurls; the chart follows through the files upload API
(``files.getUploadURLExternal``, the upload, ``files.completeUploadExternal`` with the caption as its comment). A
message Slack refuses as ``invalid_blocks`` is sent again as plain mrkdwn text rather than lost.

**Incoming webhooks** (``DIGEST_SLACK_WEBHOOK_URLS``, name=URL pairs: each URL posts to the one channel it was made
for): the same sections, no chart — a webhook cannot upload a file, which `digest doctor` and the docs say.

Each part is posted once through `digest.channels.once.ExactlyOnce`; a message's ``ts`` is recorded as its id
(``1784548800.000100`` → 1784548800000100).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from digest.channels.channel import DeliveryError
from digest.channels.once import ExactlyOnce, PartsChannel, SendGuard
from digest.channels.slack.api import SlackApi
from digest.channels.slack.mrkdwn import blocks_of, fallback, from_html, parts_of
from digest.channels.state import Part, PartKind

log = logging.getLogger(__name__)

SLACK = "slack"
# A conversation's id: channels C…, private channels G…, direct messages D….
_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{6,}")
_MAX_CAPTION = 3000


def ts_id(ts: str) -> int:
    """A message's ``ts`` as the integer the delivery state records (its digits); 0 when it is not one."""
    digits = ts.replace(".", "")
    return int(digits) if digits.isdigit() else 0


def _blocks(text: str) -> list[dict[str, Any]]:
    return [{"type": "section", "text": {"type": "mrkdwn", "text": block}} for block in blocks_of(text)]


def _invalid_blocks(exc: DeliveryError) -> bool:
    return exc.permanent and "invalid_blocks" in str(exc)


@dataclass
class SlackParts:
    """`digest.channels.once.PartWriter` of a bot token: messages by chat.postMessage, the chart by the files API."""

    api: SlackApi
    # The channel ids Slack answered for the recipients ("#ops" → "C0123ABCD"), for the chart's upload.
    channel_ids: dict[str, str] = field(default_factory=dict)

    def texts(self, message: str) -> list[str]:
        return parts_of(from_html(message))

    async def send(self, address: str, part: Part, guard: SendGuard, reply_to: int | None = None) -> tuple[str, int]:
        if part.kind is PartKind.TEXT:
            return address, await self._message(address, part.text, guard)
        if part.data is None:
            raise DeliveryError("the stored chart has no image", permanent=True)
        await self._chart(address, part, guard)
        return address, 0

    async def _message(self, address: str, text: str, guard: SendGuard) -> int:
        payload = {
            "channel": address,
            "text": fallback(text),
            "blocks": _blocks(text),
            "unfurl_links": False,
            "unfurl_media": False,
        }
        try:
            answer = await self.api.call("chat.postMessage", payload, guard)
        except DeliveryError as exc:
            if not _invalid_blocks(exc):
                raise
            log.warning("Slack refused the blocks for %s (%s); sending the part as plain text", address, exc)
            answer = await self.api.call("chat.postMessage", {"channel": address, "text": text}, guard)
        channel = answer.get("channel")
        if isinstance(channel, str) and channel:
            self.channel_ids[address] = channel
        return ts_id(str(answer.get("ts", "")))

    async def _chart(self, address: str, part: Part, guard: SendGuard) -> None:
        channel = self.channel_ids.get(address) or (address if _CHANNEL_ID.fullmatch(address) else None)
        if channel is None:
            raise DeliveryError(
                f"the chart needs {address}'s channel id (C…): configure the id instead of the name", permanent=True
            )
        data = part.data or b""
        filename = part.filename or "digest.png"
        upload = await self.api.call(
            "files.getUploadURLExternal", {"filename": filename, "length": str(len(data))}, form=True
        )
        url, file_id = upload.get("upload_url"), upload.get("file_id")
        if not isinstance(url, str) or not isinstance(file_id, str):
            raise DeliveryError("Slack answered no upload URL for the chart", permanent=False)
        # The upload itself shows nothing: only completing it posts the file, so only that is counted by the guard.
        await self.api.send(url, "chart upload", None, content=data, web_api=False)
        comment = part.text if len(part.text) <= _MAX_CAPTION else part.text[: _MAX_CAPTION - 1] + "…"
        await self.api.call(
            "files.completeUploadExternal",
            {"files": [{"id": file_id, "title": filename}], "channel_id": channel, "initial_comment": comment},
            guard,
            form=True,
        )


@dataclass(frozen=True)
class SlackWebhookParts:
    """`digest.channels.once.PartWriter` of incoming webhooks: the sections POSTed to the recipient's URL."""

    api: SlackApi
    endpoints: Mapping[str, str]

    def texts(self, message: str) -> list[str]:
        return parts_of(from_html(message))

    async def send(self, address: str, part: Part, guard: SendGuard, reply_to: int | None = None) -> tuple[str, int]:
        if part.kind is not PartKind.TEXT:
            raise DeliveryError("an incoming webhook cannot post a chart", permanent=True)
        url = self.endpoints.get(address)
        if url is None:
            raise DeliveryError(f"no URL is configured for Slack webhook {address}", permanent=True)
        payload = {"text": fallback(part.text), "blocks": _blocks(part.text)}
        try:
            await self.api.send(url, f"webhook {address}", guard, payload=payload, web_api=False)
        except DeliveryError as exc:
            if not _invalid_blocks(exc):
                raise
            log.warning("Slack refused the blocks for %s (%s); sending the part as plain text", address, exc)
            await self.api.send(url, f"webhook {address}", guard, payload={"text": part.text}, web_api=False)
        return address, 0


def slack_channel(once: ExactlyOnce, api: SlackApi, channel_ids: tuple[str, ...], chart: bool = True) -> PartsChannel:
    """Slack channels posted to with a bot token; the chart too when ``chart``.

    Its format is the HTML Telegram gets, converted to mrkdwn by the writer, so the sections are Telegram's.
    """
    return PartsChannel(SLACK, "Slack", once, channel_ids, lambda _key: SlackParts(api), chart=chart)


def slack_webhook_channel(once: ExactlyOnce, api: SlackApi, endpoints: Mapping[str, str]) -> PartsChannel:
    """Slack incoming webhooks by name (name → URL, a secret): the digest's sections, never a chart."""
    return PartsChannel(SLACK, "Slack", once, tuple(endpoints), lambda _key: SlackWebhookParts(api, endpoints))
