"""Mattermost: the digest as Markdown, by a bot token (REST API v4, the chart as a file) or by incoming webhooks.

Webhooks post text only. Where Mattermost is not Slack-compatible, and why this is a channel of its own: its incoming
webhooks take Slack's ``text`` (and legacy ``attachments``) but not Block Kit ``blocks``; it renders Markdown, not
mrkdwn (``*x*`` is italic there, links are ``[label](url)``, not ``<url|label>``); its mentions are ``@channel``,
``@all`` and ``@here`` in plain text, not ``<!channel>``; and its bot API is its own REST API
(``POST /api/v4/posts``, files by ``/api/v4/files`` then ``file_ids``), not ``chat.postMessage``.

``markdown``: Telegram's HTML digest as Mattermost Markdown, mentions neutralised; ``channel``: the two `Channel`
classes; ``check``: the token (``users/me``) and each channel, for `digest doctor`.
"""
