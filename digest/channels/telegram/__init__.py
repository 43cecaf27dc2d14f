"""Telegram, the one channel today.

``channel``: `TelegramChannel`, the `digest.channels.channel.Channel` the CronJob and replay post through;
``sender``: the Bot API client (exactly-once parts, retries, 429, chat migrations); ``text``: the splitting and its
HTML rules; ``allowance``: `/digest`'s per-chat burst allowance. The bot's command handlers and schedule live in
`digest.app.bot`: they ask the engine for digests, and channels sit below the app, never above it.
"""
