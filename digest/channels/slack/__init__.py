"""Slack: the digest as Block Kit sections, by a bot token or by incoming webhooks.

A bot token posts with chat.postMessage and uploads the chart with the files upload API; an incoming webhook posts
text only (a webhook cannot upload a file). ``mrkdwn``: Telegram's HTML digest as Slack mrkdwn, cut into
3,000-character section blocks; ``api``: the Web API client (429 Retry-After, permanent and transient errors told
apart); ``channel``: the two `Channel` classes; ``check``: `auth.test` for `digest doctor`.
"""
