"""Telegram, the one channel today.

The Bot API sender (``sender``: exactly-once parts, retries, 429), the text splitting and its HTML rules
(``text``), and the bot's handlers (``bot``).
"""
