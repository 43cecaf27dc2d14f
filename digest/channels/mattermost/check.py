"""What `digest doctor` says of Mattermost: the bot's token (``users/me``) and each channel, nothing posted.

``GET /api/v4/users/me`` proves the token and names the bot; ``GET /api/v4/channels/{id}`` says whether the bot can
see each channel — a 404 (no such channel, or a private one without the bot) or a 403 is what a post would meet.
Incoming webhooks cannot be asked without posting; the doctor says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from digest.channels.retry import short


@dataclass(frozen=True)
class MattermostChannelCheck:
    """One configured channel: whether a post can go there, and what was found."""

    channel: str
    ok: bool
    said: str


@dataclass(frozen=True)
class MattermostCheck:
    """The token and every configured channel."""

    who: str | None
    problem: str | None
    channels: tuple[MattermostChannelCheck, ...] = ()

    @property
    def ok(self) -> bool:
        return self.problem is None and all(channel.ok for channel in self.channels)


async def check_mattermost(
    client: httpx.AsyncClient, server_url: str, token: str, channel_ids: Sequence[str]
) -> MattermostCheck:
    """Ask ``users/me`` and each ``channels/{id}``; nothing is posted."""
    root = f"{server_url.rstrip('/')}/api/v4"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        me = await client.get(f"{root}/users/me", headers=headers)
    except httpx.HTTPError as exc:
        return MattermostCheck(None, f"Mattermost at {server_url} did not answer: {type(exc).__name__}")
    if me.status_code != 200:
        return MattermostCheck(None, f"refused by Mattermost: HTTP {me.status_code}: {_message(me)}")
    who = f"@{_json(me).get('username', '?')}"
    found = []
    for channel in channel_ids:
        try:
            answer = await client.get(f"{root}/channels/{channel}", headers=headers)
        except httpx.HTTPError as exc:
            found.append(MattermostChannelCheck(channel, False, f"not readable: {type(exc).__name__}"))
            continue
        if answer.status_code == 200:
            body = _json(answer)
            name = body.get("display_name") or body.get("name") or channel
            found.append(MattermostChannelCheck(channel, True, f"“{name}”"))
        elif answer.status_code in (403, 404):
            why = (
                "not found, or private without the bot: add the bot to it"
                if answer.status_code == 404
                else _message(answer)
            )
            found.append(MattermostChannelCheck(channel, False, why))
        else:
            found.append(MattermostChannelCheck(channel, False, f"HTTP {answer.status_code}: {_message(answer)}"))
    return MattermostCheck(who, None, tuple(found))


def _json(response: httpx.Response) -> dict[str, object]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _message(response: httpx.Response) -> str:
    said = _json(response).get("message")
    return short(str(said)) if said else short(response.text) or "no reason given"
