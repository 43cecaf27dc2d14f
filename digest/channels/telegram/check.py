"""What `digest doctor` says of Telegram: the token and each configured chat, asked without posting anything.

``getMe`` proves the token (and that ``DIGEST_TELEGRAM_API_URL`` answers as the Bot API); ``getChat`` for each chat
of ``DIGEST_TELEGRAM_CHAT_IDS`` proves the bot can see it — it was added and not removed since — and says what it is,
so that a chat written with a forum topic (``-100…:77``) is known to be a forum. Whether a topic exists cannot be
asked without posting in it; a missing one is named at the first post instead ("message thread not found").

The doctor's retries are short (`DOCTOR_RETRY`): it is run by a person waiting for its answer, and a Telegram that
does not answer within a few seconds is worth saying, not waiting out like a scheduled post.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from telegram import Bot
from telegram.error import Forbidden, TelegramError

from digest.channels.channel import DeliveryError
from digest.channels.retry import RetryPolicy
from digest.channels.telegram.sender import ChatId, open_bot

DOCTOR_RETRY = RetryPolicy(total_seconds=10.0, base_delay_seconds=0.5, max_delay_seconds=4.0)


@dataclass(frozen=True)
class ChatCheck:
    """One configured chat: as written in the settings, whether a post can go there, and what was found."""

    chat: str
    ok: bool
    said: str


@dataclass(frozen=True)
class TelegramCheck:
    """The bot's token and every configured chat."""

    bot: str | None  # "@digest_bot" once the token is accepted
    problem: str | None  # why the bot could not be opened at all
    chats: tuple[ChatCheck, ...] = ()

    @property
    def ok(self) -> bool:
        """The token is accepted and every chat can be posted to."""
        return self.problem is None and all(chat.ok for chat in self.chats)


async def check_telegram(
    token: str,
    api_url: str,
    chat_ids: Sequence[ChatId],
    topics: Mapping[ChatId, int],
    retry: RetryPolicy = DOCTOR_RETRY,
) -> TelegramCheck:
    """Open the bot (``getMe``) and look at each chat (``getChat``); nothing is sent to any chat."""
    try:
        async with open_bot(token, api_url, retry=retry) as bot:
            name = f"@{bot.username}" if bot.username else "the bot"
            chats = [await _chat(bot, chat, topics.get(chat)) for chat in chat_ids]
    except DeliveryError as exc:
        return TelegramCheck(bot=None, problem=str(exc))
    return TelegramCheck(bot=name, problem=None, chats=tuple(chats))


async def _chat(bot: Bot, chat: ChatId, topic: int | None) -> ChatCheck:
    written = f"{chat}:{topic}" if topic is not None else str(chat)
    try:
        found = await bot.get_chat(chat)
    except Forbidden as exc:
        return ChatCheck(written, False, f"refused: {exc.message} (add the bot to the chat again)")
    except TelegramError as exc:
        reason = exc.message
        if "chat not found" in reason.lower():
            return ChatCheck(written, False, "chat not found: the bot was never added to it, or the id is wrong")
        if "upgraded to a supergroup" in reason.lower():
            return ChatCheck(written, False, f"{reason}: write the supergroup's id instead")
        return ChatCheck(written, False, f"not readable: {reason}")
    title = found.title or found.username or found.first_name or ""
    kind = f"{found.type} “{title}”" if title else str(found.type)
    if topic is None:
        return ChatCheck(written, True, kind + (", a forum: posts go to its General topic" if found.is_forum else ""))
    if not found.is_forum:
        return ChatCheck(written, False, f"{kind} is no forum: topic {topic} cannot be posted to (drop :{topic})")
    return ChatCheck(written, True, f"{kind}, a forum: posts go to topic {topic} (not checked before the first post)")
