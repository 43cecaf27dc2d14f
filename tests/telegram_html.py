"""Telegram's HTML parse mode, ported from TDLib, with the text lengths and bot commands Telegram derives from text.

Used by the fake Bot API server (``tests/fake_telegram.py``) to answer a ``parse_mode=HTML`` message exactly as
Telegram would, and by tests that check what a user sees: ``parse_html`` returns the visible text and its entities.

* HTML parse mode is a port of TDLib's ``parse_html`` (td/telegram/MessageEntity.cpp), with its error texts
  (``Unsupported start tag "script" at byte offset 0``, ``Can't find end tag corresponding to start tag "b"``, …),
  which the Bot API server prefixes with ``can't parse entities:`` (telegram-bot-api Client.cpp lower-cases the first
  letter after ``Bad Request:``). ``strict=True`` (the default) adds the rule of the Bot API documentation that
  TDLib itself does not enforce: a bare ``&`` or ``>`` outside a tag, or a named entity other than ``&lt; &gt; &amp;
  &quot;``, is refused too (those wordings are this port's own). ``strict=False`` is TDLib exactly, which keeps
  such characters as text.
* ``text_length`` counts what Telegram compares with its limits: code points (TDLib's ``utf8_length``) or UTF-16
  code units. Entity offsets and lengths are always UTF-16.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "HtmlParseError",
    "JsonDict",
    "LengthUnit",
    "bot_command_entities",
    "parse_html",
    "text_length",
]

JsonDict = dict[str, Any]
LengthUnit = Literal["codepoint", "utf16"]


class HtmlParseError(ValueError):
    """HTML that Telegram refuses; the message is what follows ``can't parse entities:`` in its answer."""


_SUPPORTED_TAGS = frozenset(
    {
        "a",
        "b",
        "strong",
        "i",
        "em",
        "s",
        "strike",
        "del",
        "u",
        "ins",
        "tg-spoiler",
        "tg-emoji",
        "tg-time",
        "span",
        "pre",
        "code",
        "blockquote",
    }
)
_SIMPLE_ENTITY = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "u": "underline",
    "ins": "underline",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
}
_NAMED_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
# TDLib's is_space: the C string's terminating NUL counts as space, which is how it notices the end of the text.
_SPACE = frozenset(" \t\r\n\v\0")
_DIGITS = frozenset("0123456789")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_DATE_TIME_FORMAT = re.compile(r"r|w?[dD]?[tT]?")


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8", "surrogatepass"))


def text_length(text: str, unit: LengthUnit = "codepoint") -> int:
    """The length Telegram compares with its limits: code points (TDLib's ``utf8_length``) or UTF-16 code units."""
    return len(text) if unit == "codepoint" else _utf16_len(text)


def _is_ascii_alnum(char: str) -> bool:
    return char.isascii() and char.isalnum()


def _decode_entity(s: str, pos: int, *, strict: bool) -> tuple[str, int] | None:
    """Decode the character reference at ``s[pos] == "&"``; (character, index after it), or None if there is none.

    ``s`` ends with a NUL sentinel. A port of TDLib's ``decode_html_entity``: the ``;`` is optional there (required
    when ``strict``), ``&#x`` takes a lower-case ``x`` only, and code 0 or above U+10FFFF is no entity.
    """
    end = pos + 1
    if s[end] == "#":
        end += 1
        code = 0
        if s[end] == "x":
            end += 1
            while s[end] in _HEX_DIGITS:
                code = code * 16 + int(s[end], 16)
                end += 1
        else:
            while s[end] in _DIGITS:
                code = code * 10 + int(s[end])
                end += 1
        if code == 0 or code >= 0x10FFFF or end - pos >= 10:
            return None
        char = chr(code)
    else:
        while s[end].isascii() and s[end].isalpha():
            end += 1
        named = _NAMED_ENTITIES.get(s[pos + 1 : end])
        if named is None:
            return None
        char = named
    if s[end] == ";":
        end += 1
    elif strict:
        return None
    return char, end


@dataclass
class _OpenTag:
    name: str
    argument: str
    attributes: dict[str, str]
    utf16_offset: int
    piece_index: int
    byte_offset: int


def _strict_ampersand_error(s: str, pos: int, html: str) -> HtmlParseError:
    end = pos + 1
    while s[end].isascii() and s[end].isalpha():
        end += 1
    if end > pos + 1 and s[end] == ";":
        return HtmlParseError(f'Unsupported HTML entity "{s[pos : end + 1]}" at byte offset {_byte_offset(html, pos)}')
    return HtmlParseError(f'Character "&" at byte offset {_byte_offset(html, pos)} must be escaped as "&amp;"')


def _read_attribute_value(s: str, i: int) -> tuple[str, int, int]:
    """The value starting at ``s[i]`` (quoted or a name token), the index after it, and where a name token began."""
    if s[i] not in "'\"":
        token_begin = i
        while _is_ascii_alnum(s[i]) or s[i] in ".-":
            i += 1
        return s[token_begin:i].lower(), i, token_begin
    quote = s[i]
    i += 1
    value: list[str] = []
    while s[i] != quote and s[i] != "\0":
        if s[i] == "&":
            decoded = _decode_entity(s, i, strict=False)
            if decoded is not None:
                value.append(decoded[0])
                i = decoded[1]
                continue
        value.append(s[i])
        i += 1
    if s[i] == quote:
        i += 1
    return "".join(value), i, -1


def _read_start_tag(s: str, html: str, begin: int) -> tuple[str, str, dict[str, str], int]:
    """Parse the start tag at ``s[begin] == "<"``: (name, argument, attributes, index of its closing ``>``)."""
    i = begin + 1
    while s[i] not in _SPACE and s[i] != ">":
        i += 1
    offset = _byte_offset(html, begin)
    if s[i] == "\0":
        raise HtmlParseError(f"Unclosed start tag at byte offset {offset}")
    tag = s[begin + 1 : i].lower()
    if tag not in _SUPPORTED_TAGS:
        raise HtmlParseError(f'Unsupported start tag "{tag}" at byte offset {offset}')
    argument = ""
    attributes: dict[str, str] = {}
    while s[i] != ">":
        while s[i] != "\0" and s[i] in _SPACE:
            i += 1
        if s[i] == ">":
            break
        name_begin = i
        while s[i] not in _SPACE and s[i] not in "=>/\"'":
            i += 1
        name = s[name_begin:i]
        if not name:
            raise HtmlParseError(f'Empty attribute name in the tag "{tag}" at byte offset {offset}')
        while s[i] != "\0" and s[i] in _SPACE:
            i += 1
        if s[i] != "=":
            if s[i] == "\0":
                raise HtmlParseError(f'Unclosed start tag "{tag}" at byte offset {offset}')
            if tag == "blockquote" and name == "expandable":
                argument = "1"
            continue
        i += 1
        while s[i] != "\0" and s[i] in _SPACE:
            i += 1
        if s[i] == "\0":
            raise HtmlParseError(f'Unclosed start tag "{tag}" at byte offset {offset}')
        value, i, token_begin = _read_attribute_value(s, i)
        if token_begin >= 0 and s[i] not in _SPACE and s[i] != ">":
            raise HtmlParseError(f"Unexpected end of name token at byte offset {_byte_offset(html, token_begin)}")
        if s[i] == "\0":
            raise HtmlParseError(f"Unclosed start tag at byte offset {offset}")
        attributes[name] = value
        if tag == "a" and name == "href":
            argument = value
        elif tag == "code" and name == "class" and value.startswith("language-"):
            argument = value[len("language-") :]
        elif tag == "span" and name == "class" and value.startswith("tg-"):
            argument = value[len("tg-") :]
        elif (tag == "tg-emoji" and name == "emoji-id") or (tag == "tg-time" and name == "unix"):
            argument = value
        elif tag == "blockquote" and name == "expandable":
            argument = "1"
    if tag == "span" and argument != "spoiler":
        raise HtmlParseError(f'Tag "span" must have class "tg-spoiler" at byte offset {offset}')
    return tag, argument, attributes, i


def _link_entity(url: str, offset: int, length: int) -> JsonDict | None:
    mention = re.fullmatch(r"tg://user\?id=(\d+)", url)
    if mention:
        user = {"id": int(mention.group(1)), "is_bot": False, "first_name": ""}
        return {"type": "text_mention", "offset": offset, "length": length, "user": user}
    url = url.strip()
    if not url or any(char in _SPACE for char in url):
        return None  # TDLib's get_checked_link drops a link it cannot read, keeping the text
    if "://" not in url and not url.startswith(("tg:", "mailto:")):
        url = "http://" + url
    return {"type": "text_link", "offset": offset, "length": length, "url": url}


def _close_entity(tag: _OpenTag, entities: list[JsonDict], utf16_offset: int, pieces: list[str]) -> None:
    """Add the entity a closed tag makes (TDLib makes none for an empty one)."""
    offset = tag.utf16_offset
    length = utf16_offset - offset
    if length <= 0:
        return
    name = tag.name
    last = entities[-1] if entities else None
    same_span = last is not None and last["offset"] == offset and last["length"] == length
    if name in _SIMPLE_ENTITY:
        entities.append({"type": _SIMPLE_ENTITY[name], "offset": offset, "length": length})
    elif name == "tg-emoji":
        if not re.fullmatch(r"-?\d{1,19}", tag.argument) or int(tag.argument) == 0:
            raise HtmlParseError("Invalid custom emoji identifier specified")
        entities.append({"type": "custom_emoji", "offset": offset, "length": length, "custom_emoji_id": tag.argument})
    elif name == "tg-time":
        # Bot API 9.x: <tg-time unix="…" format="…">; the wording of these two refusals is this fake's own.
        if not re.fullmatch(r"\d{1,12}", tag.argument):
            raise HtmlParseError(f'Invalid Unix time specified in the tag "tg-time" at byte offset {tag.byte_offset}')
        date_format = tag.attributes.get("format", "")
        if not _DATE_TIME_FORMAT.fullmatch(date_format):
            raise HtmlParseError(f'Invalid date time format "{date_format}" at byte offset {tag.byte_offset}')
        entity = {"type": "date_time", "offset": offset, "length": length, "unix_time": int(tag.argument)}
        entities.append({**entity, "date_time_format": date_format} if date_format else entity)
    elif name == "a":
        link = _link_entity(tag.argument or "".join(pieces[tag.piece_index :]), offset, length)
        if link is not None:
            entities.append(link)
    elif name == "pre":
        if last is not None and same_span and last["type"] == "code":
            last["type"] = "pre"  # <pre><code class="language-x">: one pre entity, with the language if any
        else:
            entities.append({"type": "pre", "offset": offset, "length": length})
    elif name == "code":
        if last is not None and same_span and last["type"] == "pre" and tag.argument:
            last["_language"] = tag.argument
        else:
            entities.append({"type": "code", "offset": offset, "length": length, "_language": tag.argument})
    elif name == "blockquote":
        kind = "expandable_blockquote" if tag.argument else "blockquote"
        entities.append({"type": kind, "offset": offset, "length": length})


def _finish_entities(entities: list[JsonDict]) -> list[JsonDict]:
    finished: list[JsonDict] = []
    for entity in entities:
        language = entity.pop("_language", "")
        if entity["type"] == "pre" and language:
            entity["language"] = language
        finished.append(entity)
    finished.sort(key=lambda entity: (entity["offset"], -entity["length"]))
    return finished


def parse_html(html: str, *, strict: bool = True) -> tuple[str, list[JsonDict]]:
    """The visible text and Bot API ``MessageEntity`` dicts of ``html`` in Telegram's HTML parse mode.

    Raises :class:`HtmlParseError` with TDLib's reason where Telegram answers ``can't parse entities``. With
    ``strict`` a bare ``&`` or ``>`` in the text, or a named entity Telegram does not know, is refused as the Bot API
    documentation asks; without it they are kept as text, as TDLib does.
    """
    s = html + "\0"
    size = len(html)
    pieces: list[str] = []
    entities: list[JsonDict] = []
    stack: list[_OpenTag] = []
    utf16_offset = 0
    i = 0
    while i < size:
        char = s[i]
        if char == "&":
            decoded = _decode_entity(s, i, strict=strict)
            if decoded is not None:
                pieces.append(decoded[0])
                utf16_offset += 1  # a lone surrogate counts one, a full character from one entity two
                if ord(decoded[0]) > 0xFFFF:
                    utf16_offset += 1
                i = decoded[1]
                continue
            if strict:
                raise _strict_ampersand_error(s, i, html)
        if char != "<":
            if strict and char == ">":
                raise HtmlParseError(f'Character ">" at byte offset {_byte_offset(html, i)} must be escaped as "&gt;"')
            pieces.append(char)
            utf16_offset += 2 if ord(char) > 0xFFFF else 1
            i += 1
            continue
        begin = i
        if s[begin + 1] != "/":
            name, argument, attributes, i = _read_start_tag(s, html, begin)
            stack.append(_OpenTag(name, argument, attributes, utf16_offset, len(pieces), _byte_offset(html, begin)))
            i += 1
            continue
        offset = _byte_offset(html, begin)
        if not stack:
            raise HtmlParseError(f"Unexpected end tag at byte offset {offset}")
        i = begin + 1
        while s[i] not in _SPACE and s[i] != ">":
            i += 1
        end_name = s[begin + 2 : i].lower()
        while s[i] in _SPACE and s[i] != "\0":
            i += 1
        if s[i] != ">":
            raise HtmlParseError(f"Unclosed end tag at byte offset {offset}")
        open_tag = stack[-1]
        if end_name and end_name != open_tag.name:
            raise HtmlParseError(
                f'Unmatched end tag at byte offset {offset}, expected "</{open_tag.name}>", found "</{end_name}>"'
            )
        _close_entity(open_tag, entities, utf16_offset, pieces)
        stack.pop()
        i += 1
    if stack:
        raise HtmlParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1].name}"')
    text = "".join(pieces)
    try:
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        raise HtmlParseError(
            "Text contains invalid Unicode characters after decoding HTML entities, check for unmatched surrogate "
            "code units"
        ) from None
    return text, _finish_entities(entities)


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def bot_command_entities(text: str) -> list[JsonDict]:
    """The ``bot_command`` entities Telegram marks in ``text`` (a port of TDLib's ``match_bot_commands``).

    ``/command`` of 1-64 of ``[A-Za-z0-9_]``, optionally ``@botname`` of 3-32, not touching a word character or
    ``/ < >`` on either side. Offsets and lengths are in UTF-16 code units.
    """
    found: list[JsonDict] = []
    size = len(text)
    for start in (index for index, char in enumerate(text) if char == "/"):
        if start > 0 and (_is_word_char(text[start - 1]) or text[start - 1] in "/<>"):
            continue
        end = start + 1
        while end < size and (_is_ascii_alnum(text[end]) or text[end] == "_"):
            end += 1
        if not 1 <= end - start - 1 <= 64:
            continue
        if end < size and text[end] == "@":
            mention_end = end + 1
            while mention_end < size and (_is_ascii_alnum(text[mention_end]) or text[mention_end] == "_"):
                mention_end += 1
            if not 3 <= mention_end - end - 1 <= 32:
                continue
            end = mention_end
        if end < size and (_is_word_char(text[end]) or text[end] in "/<>"):
            continue
        found.append({"type": "bot_command", "offset": _utf16_len(text[:start]), "length": _utf16_len(text[start:end])})
    return found
