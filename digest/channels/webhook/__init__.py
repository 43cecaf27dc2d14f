"""A generic signed webhook: the JSON digest POSTed to each configured URL, once per delivery key.

``channel``: `webhook_channel` (the `digest.channels.channel.Channel`) and `WebhookParts` (how one POST is made,
signed and retried); ``signature``: the HMAC-SHA256 signature header a receiver checks.
"""
