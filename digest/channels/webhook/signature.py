"""The signature of a webhook post: HMAC-SHA256 over the timestamp and the exact body, in one header.

``X-Digest-Signature: t=1784548800,v1=<64 hex digits>``, where v1 is HMAC-SHA256(secret, "<t>." + body) — the scheme
Stripe and Slack use: the receiver recomputes it over the bytes it received (before parsing them) and refuses a
signature that differs or a timestamp older than a few minutes, so a captured post cannot be replayed later and a
changed body is refused. Each retry is signed afresh with its own timestamp.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Digest-Signature"
# What a receiver should accept: a post signed more than this long ago (or ahead) is a replay or a wrong clock.
TOLERANCE_SECONDS = 300


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """The header's value for ``body`` sent at ``timestamp`` (Unix seconds)."""
    digest = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(secret: bytes, header: str, body: bytes, now: int, tolerance: int = TOLERANCE_SECONDS) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` within ``tolerance`` seconds of ``now`` (for receivers)."""
    fields = dict(part.partition("=")[::2] for part in header.split(","))
    try:
        timestamp = int(fields.get("t", ""))
    except ValueError:
        return False
    if abs(now - timestamp) > tolerance:
        return False
    expected = sign(secret, timestamp, body).partition(",v1=")[2]
    return hmac.compare_digest(expected, fields.get("v1", ""))
