"""Channels: where a rendered digest is delivered, once per recipient.

``channel``: the contract (the `Channel` protocol, `PostResult`, `DeliveryError`); ``state``: the delivery state file
(claims, stored parts, outcomes); ``once``: the exactly-once protocol every channel posts through; ``dispatch``: the
scheduled rounds over every channel; ``schedule``: when the posts fall and their keys; ``retry``: the retry budget.
One package per service: ``telegram`` (also the bot and its commands), ``slack``, ``webhook``.
"""
