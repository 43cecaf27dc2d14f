"""Telegram, the one channel today.

``channel``: `TelegramChannel`, the `digest.channels.channel.Channel` the CronJob and replay post through;
``sender``: the Bot API client (exactly-once parts, retries, 429, chat migrations); ``text``: the splitting and its
HTML rules; ``allowance``: `/digest`'s per-chat burst allowance; ``bot``: the bot `digest serve` runs (commands,
the daily schedule), handed its settings view, digests and hooks by `digest.app.bot` — channels sit below the app
and never import it.
"""
