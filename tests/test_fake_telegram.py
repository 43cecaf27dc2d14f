"""The fake Bot API server answers python-telegram-bot the way Telegram does where the bot depends on it."""

from __future__ import annotations

import asyncio
import datetime as dtm
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest
import telegram
from telegram import error as tg_error
from telegram.ext import ApplicationBuilder, CommandHandler, ContextTypes
from telegram.request import HTTPXRequest

from tests.fake_telegram import FakeTelegram
from tests.telegram_html import HtmlParseError, bot_command_entities, parse_html

CHAT = 4242
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + b"\x00\x00\x02\x00\x00\x00\x01\x00" + bytes(range(256)) * 4


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    """A started server that knows CHAT; it must have hit no bug of its own by the end of the test."""
    with FakeTelegram(known_chats={CHAT}) as server:
        yield server
        assert server.internal_errors == []


@asynccontextmanager
async def connected(server: FakeTelegram, **kwargs: object) -> AsyncIterator[telegram.Bot]:
    """An initialized Bot whose URLs are composed from root as the application's are."""
    bot = telegram.Bot(server.token, base_url=f"{server.root}/bot", base_file_url=f"{server.root}/file/bot", **kwargs)
    async with bot:
        yield bot


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[telegram.Bot]:
    """A Bot connected to ``tg``."""
    async with connected(tg) as connected_bot:
        yield connected_bot


def seconds(value: int | dtm.timedelta) -> float:
    """Seconds from RetryAfter.retry_after, an int in PTB 22 and a timedelta later."""
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)


# -- getMe, URLs, tokens ------------------------------------------------------------------------------------------


async def test_get_me_answers_the_bot_user(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """The getMe answer is a bot User with the fields python-telegram-bot reads, at {root}/bot{token}/getMe."""
    me = await bot.get_me()
    assert me.is_bot
    assert me.id == int(tg.token.split(":")[0])
    assert me.username == "digest_test_bot"
    assert me.can_join_groups is True
    assert tg.calls[-1].method == "getMe"
    assert tg.calls[-1].status == 200


async def test_wrong_token_is_invalid_token(tg: FakeTelegram) -> None:
    """A token of the right shape that is not the bot's gets 401 Unauthorized, a malformed one 404: InvalidToken."""
    wrong = telegram.Bot("987654321:" + "W" * 35, base_url=tg.base_url, base_file_url=tg.base_file_url)
    with pytest.raises(tg_error.InvalidToken, match="Unauthorized"):
        await wrong.get_me()
    assert (tg.calls[-1].status, tg.calls[-1].description) == (401, "Unauthorized")
    malformed = telegram.Bot("not-a-token", base_url=tg.base_url, base_file_url=tg.base_file_url)
    with pytest.raises(tg_error.InvalidToken):
        await malformed.get_me()
    assert tg.calls[-1].status == 404


async def test_unknown_method_is_404_not_found(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """An unknown method answers 404 {"ok":false,"error_code":404,"description":"Not Found"}."""
    with pytest.raises(tg_error.EndPointNotFound):
        await bot.do_api_request("noSuchMethod")
    async with httpx.AsyncClient() as client:
        answer = await client.get(f"{tg.base_url}{tg.token}/noSuchMethod")
    assert answer.status_code == 404
    assert answer.json() == {"ok": False, "error_code": 404, "description": "Not Found"}


# -- HTML parse mode ----------------------------------------------------------------------------------------------


async def test_valid_html_is_accepted_with_entities(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """Telegram's tags become entities over the visible text, with UTF-16 offsets and entities decoded."""
    html = (
        '😀 <b>bold</b> &lt;&amp;&gt;&quot;&#65;&#x42; <a href="https://example.org/?a=1&amp;b=2">link</a>\n'
        '<pre><code class="language-python">x = 1</code></pre><blockquote expandable><i>q</i></blockquote>'
        '<span class="tg-spoiler">s</span><tg-spoiler>t</tg-spoiler><u>u</u><s>s</s><code>c</code>'
    )
    message = await bot.send_message(CHAT, html, parse_mode="HTML")
    assert message.text == '😀 bold <&>"AB link\nx = 1qstusc'
    kinds = [(entity.type, entity.offset, entity.length) for entity in message.entities]
    assert ("bold", 3, 4) in kinds  # the emoji before it is two UTF-16 code units
    assert ("text_link", 15, 4) in kinds
    assert ("pre", 20, 5) in kinds
    assert ("expandable_blockquote", 25, 1) in kinds
    assert ("italic", 25, 1) in kinds
    assert [kind for kind, _, _ in kinds].count("spoiler") == 2
    pre = next(entity for entity in message.entities if entity.type == "pre")
    assert pre.language == "python"
    link = next(entity for entity in message.entities if entity.type == "text_link")
    assert link.url == "https://example.org/?a=1&b=2"
    [sent] = tg.sent
    assert (sent.method, sent.chat_id, sent.text, sent.parse_mode) == ("sendMessage", CHAT, html, "HTML")
    assert sent.visible == message.text


@pytest.mark.parametrize(
    ("html", "reason"),
    [
        ("<script>alert(1)</script>", 'unsupported start tag "script" at byte offset 0'),
        ("<b>unbalanced", 'can\'t find end tag corresponding to start tag "b"'),
        ("<b>crossed <i>tags</b></i>", 'unmatched end tag at byte offset 18, expected "</i>", found "</b>"'),
        ("AT&T", 'character "&" at byte offset 2 must be escaped as "&amp;"'),
        ("1 < 2", 'unsupported start tag "" at byte offset 2'),
        ("x<3", "unclosed start tag at byte offset 1"),
        ("a &nbsp; b", 'unsupported html entity "&nbsp;" at byte offset 2'),
        ("2 > 1", 'character ">" at byte offset 2 must be escaped as "&gt;"'),
        ('<span class="red">x</span>', 'tag "span" must have class "tg-spoiler" at byte offset 0'),
    ],
    ids=["script", "unbalanced", "crossed", "raw-ampersand", "raw-less-than", "unclosed", "nbsp", "raw-gt", "span"],
)
async def test_invalid_html_is_refused(tg: FakeTelegram, bot: telegram.Bot, html: str, reason: str) -> None:
    """HTML Telegram cannot parse is refused with BadRequest "Can't parse entities: <reason>" and nothing is sent."""
    with pytest.raises(tg_error.BadRequest) as refused:
        await bot.send_message(CHAT, html, parse_mode="HTML")
    assert str(refused.value) == f"Can't parse entities: {reason}"  # as python-telegram-bot words it
    assert tg.calls[-1].status == 400
    assert str(tg.calls[-1].description).lower() == f"bad request: can't parse entities: {reason}"
    assert tg.sent == []


async def test_text_without_parse_mode_is_taken_literally(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """With no parse_mode, tags and ampersands are plain text."""
    message = await bot.send_message(CHAT, "<script> & <b>")
    assert message.text == "<script> & <b>"
    assert message.entities == ()


async def test_lenient_html_keeps_bare_ampersand_as_tdlib_does() -> None:
    """strict_html=False follows TDLib: a bare & or > stays text, an unknown tag is still refused."""
    with FakeTelegram(known_chats={CHAT}, strict_html=False) as server:
        async with connected(server) as lenient:
            message = await lenient.send_message(CHAT, "AT&T &nbsp; 2 > 1 &lt", parse_mode="HTML")
            assert message.text == "AT&T &nbsp; 2 > 1 <"
            with pytest.raises(tg_error.BadRequest, match="unsupported start tag"):
                await lenient.send_message(CHAT, "<p>x</p>", parse_mode="HTML")


def test_parse_html_is_usable_offline() -> None:
    """parse_html checks a template's output without a server: visible text, entities, or TDLib's reason."""
    text, entities = parse_html(
        '<tg-time unix="1784505600" format="wDT">Mon 20 Jul</tg-time> <tg-emoji emoji-id="5">x</tg-emoji>'
    )
    assert text == "Mon 20 Jul x"
    assert entities[0] == {
        "type": "date_time",
        "offset": 0,
        "length": 10,
        "unix_time": 1784505600,
        "date_time_format": "wDT",
    }
    assert entities[1]["type"] == "custom_emoji"
    with pytest.raises(HtmlParseError, match="Invalid custom emoji identifier specified"):
        parse_html('<tg-emoji emoji-id="abc">x</tg-emoji>')
    assert bot_command_entities("see /digest@digest_test_bot 2026-07-20, not a/b") == [
        {"type": "bot_command", "offset": 4, "length": 23}
    ]


# -- lengths ------------------------------------------------------------------------------------------------------


async def test_text_limit_counts_visible_characters(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """4096 visible characters pass and 4097 do not; tags are free and an entity counts one character."""
    await bot.send_message(CHAT, "<b>" + "a" * 4095 + "</b>&amp;", parse_mode="HTML")
    with pytest.raises(tg_error.BadRequest, match="Message is too long"):
        await bot.send_message(CHAT, "<b>" + "a" * 4096 + "</b>&amp;", parse_mode="HTML")
    await bot.send_message(CHAT, "😀" * 4096)  # Telegram counts code points: an emoji is one
    with pytest.raises(tg_error.BadRequest, match="Message is too long"):
        await bot.send_message(CHAT, "😀" * 4097)
    assert [call.status for call in tg.calls if call.method == "sendMessage"] == [200, 400, 200, 400]


async def test_text_limit_in_utf16_when_asked() -> None:
    """With length_unit="utf16" an emoji counts 2: 2048 emoji pass, 2048 emoji and a letter do not."""
    with FakeTelegram(known_chats={CHAT}, length_unit="utf16") as server:
        async with connected(server) as utf16_bot:
            await utf16_bot.send_message(CHAT, "😀" * 2048)
            with pytest.raises(tg_error.BadRequest, match="Message is too long"):
                await utf16_bot.send_message(CHAT, "😀" * 2048 + "a")
            with pytest.raises(tg_error.BadRequest, match="Message is too long"):
                await utf16_bot.send_message(CHAT, "<i>" + "a" * 4095 + "😀</i>", parse_mode="HTML")


async def test_empty_text_is_refused(bot: telegram.Bot) -> None:
    """An empty text is "message text is empty"; one that parses to nothing visible "message must be non-empty"."""
    with pytest.raises(tg_error.BadRequest, match="Message text is empty"):
        await bot.send_message(CHAT, "")
    with pytest.raises(tg_error.BadRequest, match="Message must be non-empty"):
        await bot.send_message(CHAT, "<b> </b>\n", parse_mode="HTML")


async def test_caption_limit_is_1024(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """A caption of 1024 visible characters passes, 1025 is "message caption is too long"."""
    await bot.send_photo(CHAT, PNG, caption="<b>" + "c" * 1024 + "</b>", parse_mode="HTML")
    with pytest.raises(tg_error.BadRequest, match="Message caption is too long"):
        await bot.send_photo(CHAT, PNG, caption="c" * 1025)
    with pytest.raises(tg_error.BadRequest, match="Message caption is too long"):
        await bot.send_document(CHAT, b"report", filename="r.txt", caption="d" * 1025)
    assert len(tg.sent) == 1


# -- files --------------------------------------------------------------------------------------------------------


async def test_multipart_uploads_are_recorded_with_size(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """Multipart sendPhoto/sendDocument uploads are recorded with name, size and caption; the file is served back."""
    payload = bytes(range(256)) * 40 + b"\r\n--boundary-like\r\n"
    photo = await bot.send_photo(CHAT, PNG, caption="<i>chart</i>", parse_mode="HTML", filename="chart.png")
    document = await bot.send_document(CHAT, payload, filename="digest-2026-07-20.txt", caption="full digest")
    assert photo.photo[-1].file_size == len(PNG)
    assert (photo.photo[-1].width, photo.photo[-1].height) == (512, 256)  # read from the PNG header
    assert photo.caption == "chart"
    assert document.document.file_name == "digest-2026-07-20.txt"
    assert document.document.file_size == len(payload)
    photo_call, document_call = tg.sent_to(CHAT)
    assert (photo_call.method, photo_call.caption, photo_call.visible) == ("sendPhoto", "<i>chart</i>", "chart")
    assert [(f.param, f.filename, f.size) for f in photo_call.files] == [("photo", "chart.png", len(PNG))]
    assert [(f.param, f.filename, f.size) for f in document_call.files] == [
        ("document", "digest-2026-07-20.txt", len(payload))
    ]
    assert document_call.files[0].data == payload
    downloaded = await (await bot.get_file(document.document.file_id)).download_as_bytearray()
    assert bytes(downloaded) == payload
    with pytest.raises(tg_error.BadRequest, match="File must be non-empty"):
        await bot.send_document(CHAT, b"", filename="empty.txt")


# -- failures Telegram answers with -------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")  # retry_after becomes a timedelta
async def test_rate_limit_raises_retry_after(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """fail_next(429) answers "Too Many Requests: retry after 7" with parameters.retry_after: RetryAfter(7), once."""
    tg.fail_next("sendMessage", 429, retry_after=7)
    with pytest.raises(tg_error.RetryAfter) as limited:
        await bot.send_message(CHAT, "hello")
    assert seconds(limited.value.retry_after) == 7
    await bot.send_message(CHAT, "hello")
    failed, succeeded = [call for call in tg.calls if call.method == "sendMessage"]
    assert (failed.status, failed.description) == (429, "Too Many Requests: retry after 7")
    assert succeeded.status == 200
    assert len(tg.sent) == 1


async def test_migrated_group_raises_chat_migrated(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """A group upgraded to a supergroup answers 400 with migrate_to_chat_id: ChatMigrated(new_chat_id)."""
    tg.fail_next("sendMessage", migrate_to_chat_id=-1001234)
    with pytest.raises(tg_error.ChatMigrated) as injected:
        await bot.send_message(CHAT, "hello")
    assert injected.value.new_chat_id == -1001234
    tg.add_chat(-555)
    tg.migrate(-555, -1009999)
    with pytest.raises(tg_error.ChatMigrated) as migrated:
        await bot.send_message(-555, "hello")
    assert migrated.value.new_chat_id == -1009999
    assert tg.calls[-1].description == "Bad Request: group chat was upgraded to a supergroup chat"
    message = await bot.send_message(-1009999, "hello")
    assert message.chat.type == "supergroup"


async def test_blocked_chat_raises_forbidden(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """A user who blocked the bot answers 403 "Forbidden: bot was blocked by the user": Forbidden."""
    tg.block(CHAT)
    with pytest.raises(tg_error.Forbidden, match="Forbidden: bot was blocked by the user"):
        await bot.send_message(CHAT, "hello")
    with pytest.raises(tg_error.Forbidden):
        await bot.send_photo(CHAT, PNG)
    tg.unblock(CHAT)
    await bot.send_message(CHAT, "hello")
    tg.fail_next("sendDocument", 403)
    with pytest.raises(tg_error.Forbidden, match="blocked by the user"):
        await bot.send_document(CHAT, b"x", filename="x.txt")


async def test_unknown_chat_is_not_found_unless_any_chat_is_accepted(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """A chat the bot cannot reach is 400 "chat not found"; accept_any_chat=True reaches every chat."""
    with pytest.raises(tg_error.BadRequest, match="Chat not found"):
        await bot.send_message(777, "hello")
    tg.accept_any_chat = True
    message = await bot.send_message(777, "hello")
    assert (message.chat.id, message.message_id) == (777, 1)
    assert 777 in tg.known_chats


async def test_message_ids_increase_per_chat(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """Each chat numbers its messages from 1, incoming and outgoing together."""
    tg.add_chat(-100500)
    ids = [(await bot.send_message(chat, "x")).message_id for chat in (CHAT, CHAT, -100500, CHAT)]
    assert ids == [1, 2, 1, 3]
    assert tg.push_message(CHAT, "hi")["message"]["message_id"] == 4


async def test_server_errors_raise_network_error(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """500 and 502 answer "Internal Server Error" and "Bad Gateway", which PTB raises as NetworkError."""
    tg.fail_next("sendMessage", 500)
    tg.fail_next("sendMessage", 502, times=2)
    for expected in ("Internal Server Error", "Bad Gateway", "Bad Gateway"):
        with pytest.raises(tg_error.NetworkError, match=expected):
            await bot.send_message(CHAT, "hello")
    await bot.send_message(CHAT, "hello")
    assert [call.status for call in tg.calls if call.method == "sendMessage"] == [500, 502, 502, 200]


async def test_slow_answer_times_out_the_client(tg: FakeTelegram) -> None:
    """delay_next holds the answer back, so a client with a short read timeout raises TimedOut."""
    async with connected(tg, request=HTTPXRequest(read_timeout=0.2)) as impatient:
        tg.delay_next("sendMessage", 1.0)
        started = time.monotonic()
        with pytest.raises(tg_error.TimedOut):
            await impatient.send_message(CHAT, "hello")
        assert time.monotonic() - started < 0.9
        await impatient.send_message(CHAT, "again")  # the delay was for one call only
        # As with Telegram, a timed-out call may still land: retrying it blindly sends the message twice.
        sent = await tg.wait_for_sent_async(2, timeout=5)
    assert [call.text for call in sent] == ["again", "hello"]


# -- getUpdates ---------------------------------------------------------------------------------------------------


async def test_long_poll_wakes_when_a_message_arrives(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """A waiting getUpdates returns as soon as a message is pushed, long before its timeout."""
    started = time.monotonic()
    poll = asyncio.create_task(bot.get_updates(timeout=20))
    await tg.wait_for_poller_async()
    tg.push_message(CHAT, "good morning")
    updates = await asyncio.wait_for(poll, timeout=5)
    assert time.monotonic() - started < 5
    assert [update.message.text for update in updates] == ["good morning"]


async def test_long_poll_returns_nothing_after_its_timeout(bot: telegram.Bot) -> None:
    """With nothing to deliver, getUpdates waits out its timeout (1 s) and returns an empty list."""
    started = time.monotonic()
    updates = await bot.get_updates(timeout=1)
    elapsed = time.monotonic() - started
    assert updates == ()
    assert 0.9 <= elapsed < 5


async def test_queued_updates_return_at_once_and_offset_confirms(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """Queued updates come back without waiting, limit caps them, and an offset past them drops them."""
    for text in ("one", "two", "three"):
        tg.push_message(CHAT, text)
    started = time.monotonic()
    first = await bot.get_updates(timeout=20, limit=2)
    assert time.monotonic() - started < 2
    assert [update.message.text for update in first] == ["one", "two"]
    rest = await bot.get_updates(offset=first[-1].update_id + 1, timeout=20)
    assert [update.message.text for update in rest] == ["three"]
    assert len(tg.pending_updates) == 1  # not confirmed yet
    assert await bot.get_updates(offset=rest[-1].update_id + 1, timeout=0) == ()
    assert tg.pending_updates == []


async def test_allowed_updates_filters_updates_made_afterwards(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """After getUpdates(allowed_updates=["callback_query"]) a new message is not delivered, a button press is."""
    assert await bot.get_updates(timeout=0, allowed_updates=["callback_query"]) == ()
    tg.push_message(CHAT, "ignored")
    tg.push_callback_query(CHAT, "pressed")
    [update] = await bot.get_updates(timeout=5)
    assert update.callback_query is not None
    assert update.callback_query.data == "pressed"


async def test_a_second_get_updates_ends_the_first_with_conflict(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """Like Telegram, a new getUpdates terminates a waiting one with 409 Conflict."""
    first = asyncio.create_task(bot.get_updates(timeout=20))
    await tg.wait_for_poller_async()
    async with connected(tg) as second_instance:  # one Bot polls on a single connection: a second bot does this
        assert await second_instance.get_updates(timeout=0) == ()
    with pytest.raises(tg_error.Conflict, match="terminated by other getUpdates request"):
        await asyncio.wait_for(first, timeout=5)


async def test_command_message_carries_bot_command_entity(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """A pushed "/digest 2026-07-20" has a bot_command entity, so CommandHandler matches it with its argument."""
    tg.push_message(CHAT, "/digest 2026-07-20")
    tg.push_message(-100777, "/digest@digest_test_bot 2026-07-20", user_id=55, chat_type="supergroup")
    private, group = await bot.get_updates(timeout=5)
    [entity] = private.message.entities
    assert (entity.type, entity.offset, entity.length) == ("bot_command", 0, 7)
    assert (private.message.from_user.id, private.message.chat.type) == (CHAT, "private")
    assert (group.message.from_user.id, group.message.chat.type) == (55, "supergroup")

    async def noop(update: telegram.Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        return None

    handler = CommandHandler("digest", noop)
    for update in (private, group):
        match = handler.check_update(update)
        assert match
        assert match[0] == ["2026-07-20"]


async def test_application_replies_to_a_command_over_polling(tg: FakeTelegram) -> None:
    """An Application built with base_url=root/bot polls, runs its CommandHandler and its reply is recorded."""

    async def digest(update: telegram.Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.effective_message is not None
        await update.effective_message.reply_html(f"<b>Digest</b> for {context.args[0]}")

    application = (
        ApplicationBuilder().token(tg.token).base_url(f"{tg.root}/bot").base_file_url(f"{tg.root}/file/bot").build()
    )
    application.add_handler(CommandHandler("digest", digest))
    tg.push_message(CHAT, "/digest 2026-07-20")
    async with application:
        await application.start()
        assert application.updater is not None
        await application.updater.start_polling(timeout=1)
        [reply] = await tg.wait_for_sent_async(1, timeout=10)
        await application.updater.stop()
        await application.stop()
    assert (reply.chat_id, reply.text, reply.visible) == (CHAT, "<b>Digest</b> for 2026-07-20", "Digest for 2026-07-20")
    assert {"deleteWebhook", "getUpdates"} <= {call.method for call in tg.calls}


# -- other methods ------------------------------------------------------------------------------------------------


async def test_commands_are_validated_and_stored(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """Valid commands are stored by setMyCommands for getMyCommands; invalid ones are refused in Telegram's words."""
    await bot.set_my_commands([("digest", "Send today's digest"), ("/help", "  How it works  ")])
    assert tg.commands == [
        {"command": "digest", "description": "Send today's digest"},
        {"command": "help", "description": "How it works"},
    ]
    assert [(c.command, c.description) for c in await bot.get_my_commands()] == [
        ("digest", "Send today's digest"),
        ("help", "How it works"),
    ]
    for commands, reason in [
        ([("Digest", "Upper case")], "BOT_COMMAND_INVALID"),
        ([("di-gest", "Dash")], "BOT_COMMAND_INVALID"),
        ([("d" * 33, "Long")], "command length must not exceed 32"),
        ([("digest", "x" * 257)], "command description length must not exceed 256"),
        ([("digest", "   ")], "command description must be non-empty"),
    ]:
        with pytest.raises(tg_error.BadRequest):
            await bot.set_my_commands(commands)
        assert tg.calls[-1].description == f"Bad Request: {reason}"
    assert len(tg.commands) == 2


async def test_edit_message_text_follows_telegram(bot: telegram.Bot) -> None:
    """An edit changes the bot's message; an identical edit, an unknown message and bad HTML are refused."""
    sent = await bot.send_message(CHAT, "<b>draft</b>", parse_mode="HTML")
    edited = await bot.edit_message_text("<b>final</b>", chat_id=CHAT, message_id=sent.message_id, parse_mode="HTML")
    assert isinstance(edited, telegram.Message)
    assert (edited.text, edited.message_id) == ("final", sent.message_id)
    assert edited.edit_date is not None
    with pytest.raises(tg_error.BadRequest, match="Message is not modified"):
        await bot.edit_message_text("<b>final</b>", chat_id=CHAT, message_id=sent.message_id, parse_mode="HTML")
    with pytest.raises(tg_error.BadRequest, match="Message to edit not found"):
        await bot.edit_message_text("x", chat_id=CHAT, message_id=999)
    with pytest.raises(tg_error.BadRequest, match="Can't parse entities"):
        await bot.edit_message_text("<b>x", chat_id=CHAT, message_id=sent.message_id, parse_mode="HTML")


async def test_harmless_methods_succeed(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """sendChatAction, deleteWebhook, answerCallbackQuery, close and logOut succeed as no-ops."""
    assert await bot.send_chat_action(CHAT, "typing") is True
    assert await bot.delete_webhook(drop_pending_updates=True) is True
    await bot.send_message(CHAT, "pick one")
    query = tg.push_callback_query(CHAT, "refresh")["callback_query"]
    assert query["message"]["text"] == "pick one"
    assert await bot.answer_callback_query(query["id"], text="Refreshing") is True
    with pytest.raises(tg_error.BadRequest, match="Query is too old"):
        await bot.answer_callback_query(query["id"])
    assert await bot.close() is True
    assert await bot.log_out() is True
    assert [call.method for call in tg.sent] == ["sendMessage"]  # chat actions and no-ops are calls, not messages


@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
async def test_records_never_show_the_token(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """Calls, sent messages and the server's repr can be printed: none of them contains the token."""
    tg.fail_next("sendMessage", 429, retry_after=3)
    with pytest.raises(tg_error.RetryAfter):
        await bot.send_message(CHAT, "x")
    await bot.send_message(CHAT, "x")
    await bot.send_document(CHAT, b"data", filename="d.txt")
    printed = f"{tg!r} {tg.calls!r} {tg.sent!r} {[dict(c.params) for c in tg.calls]!r}"
    assert tg.token not in printed
    assert tg.token.split(":")[1] not in printed


async def test_wait_for_sent_waits_for_a_message_sent_later(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """wait_for_sent_async returns once the message arrives, without blocking the bot's event loop."""
    sending = asyncio.create_task(bot.send_message(CHAT, "later"))
    [sent] = await tg.wait_for_sent_async(1, timeout=5)
    assert sent.text == "later"
    await sending


def test_sync_use_with_form_json_query_and_multipart() -> None:
    """From a sync test: GET query strings, form, JSON and multipart bodies all parse; errors have Telegram's shape."""
    with FakeTelegram(accept_any_chat=True) as server, httpx.Client(base_url=f"{server.base_url}{server.token}") as api:
        assert api.get("/sendMessage", params={"chat_id": "1", "text": "<b>get</b>", "parse_mode": "HTML"}).json()["ok"]
        assert api.post("/sendMessage", data={"chat_id": "2", "text": "form"}).json()["result"]["text"] == "form"
        assert api.post("/sendMessage", json={"chat_id": 3, "text": "json"}).json()["result"]["chat"]["id"] == 3
        multipart = api.post(
            "/sendDocument", data={"chat_id": "4", "caption": "ça"}, files={"document": ("é.txt", b"abc", "text/plain")}
        )
        assert multipart.json()["result"]["document"]["file_name"] == "é.txt"
        sent = server.wait_for_sent(4, timeout=5)
        assert [(s.chat_id, s.visible) for s in sent] == [(1, "get"), (2, "form"), (3, "json"), (4, "ça")]
        assert [(f.filename, f.size) for f in sent[3].files] == [("é.txt", 3)]
        with pytest.raises(TimeoutError, match="expected 5 sent message"):
            server.wait_for_sent(5, timeout=0.2)

        server.fail_next("sendMessage", 429, retry_after=9)
        limited = api.post("/sendMessage", json={"chat_id": 1, "text": "x"})
        assert (limited.status_code, limited.json()) == (
            429,
            {
                "ok": False,
                "error_code": 429,
                "description": "Too Many Requests: retry after 9",
                "parameters": {"retry_after": 9},
            },
        )
        refused = api.post("/sendMessage", json={"chat_id": 1, "text": "a & b", "parse_mode": "HTML"})
        assert refused.status_code == 400
        assert set(refused.json()) == {"ok", "error_code", "description"}
        assert refused.json()["description"].startswith("Bad Request: can't parse entities: ")
        assert server.calls[-1].status == 400
        assert json.loads(server.calls[-1].params["chat_id"]) == 1
