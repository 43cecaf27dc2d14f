"""Channels: where a rendered digest is delivered.

``channel`` is the contract (the `Channel` protocol, `PostResult`, `DeliveryError`); ``telegram`` is its one
implementation today.
"""
