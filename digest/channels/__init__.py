"""Channels: where a rendered digest is delivered. ``channel`` is the protocol; ``telegram`` its one implementation."""
