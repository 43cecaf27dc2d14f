"""Telegram as a `digest.channels.channel.Channel`: the configured chats, each digest posted once by the `Poster`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from telegram import InlineKeyboardMarkup

from digest.channels.channel import Photo, PostResult
from digest.channels.state import TELEGRAM, DeliveryState
from digest.channels.telegram.sender import ChatId, Poster, chat_of, recipient


@dataclass(frozen=True)
class TelegramChannel:
    """The digest chats of one bot; messages are Telegram HTML, split and paced by the sender."""

    poster: Poster
    chat_ids: tuple[ChatId, ...]
    # The forum topic a chat's digests go to (``chat:topic`` in the settings); a chat not named: the chat itself.
    topics: Mapping[ChatId, int] = field(default_factory=dict)
    # The buttons under a scheduled post, by its delivery key and chat (None: no buttons).
    buttons: Callable[[str, ChatId], Awaitable[InlineKeyboardMarkup | None]] | None = None

    @property
    def name(self) -> str:
        return TELEGRAM

    @property
    def title(self) -> str:
        return "Chat"

    @property
    def format(self) -> str:
        return "html"

    @property
    def state(self) -> DeliveryState:
        return self.poster.state

    @property
    def recipients(self) -> tuple[str, ...]:
        return tuple(recipient(chat_id) for chat_id in self.chat_ids)

    async def post_once(
        self,
        recipient: str,
        key: str,
        message: Callable[[], Awaitable[str]],
        late: bool = False,
        photo: Callable[[], Awaitable[Photo | None]] | None = None,
    ) -> PostResult:
        """Post to the chat ``recipient`` names (an id's text or "@name"), each part once."""
        chat = chat_of(recipient)
        buttons = self.buttons
        markup = (lambda: buttons(key, chat)) if buttons is not None else None
        return await self.poster.post_once(
            chat, key, message, late=late, photo=photo, topic=self.topics.get(chat), markup=markup
        )
