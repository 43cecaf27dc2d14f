"""Time and identity in the corpus: the day's window, timestamps, and stable names, ids and addresses.

Every identity a corpus day shows (pod name hashes, UIDs, container ids, pod IPs) is derived by hashing its parts,
so the same (workload, revision) has the same identity on every day that has it and adjacent days agree where
their series overlap.
"""

from __future__ import annotations

import calendar
import datetime as dt
import hashlib
from dataclasses import dataclass
from functools import cached_property

SCRAPE_S = 30
DAY_S = 86_400
MINUTES = 1_440
LOOKBACK_S = 2 * 3_600
TAIL_S = 30 * 60

GIB = 1 << 30
MIB = 1 << 20

NODES = ("pi5-1", "pi5-2", "pi5-3")
NODE_INDEX = {"pi5-1": 0, "pi5-2": 1, "pi5-3": 2}


# Kubernetes' rand.String / SafeEncodeString alphabet: no vowels (no words), no 0/1/3 (no look-alikes).
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

ENVOY_DEPLOYMENT = "envoy-default-eg-e41e7b31"
ENVOY_NAMESPACE = "envoy-gateway-system"


@dataclass(frozen=True)
class Window:
    """The digest window of one day, plus the wider span its metric series cover."""

    date: dt.date

    @cached_property
    def start_s(self) -> int:
        """Unix seconds of D 00:00Z."""
        return calendar.timegm(self.date.timetuple())

    @property
    def end_s(self) -> int:
        """Unix seconds of D+1 00:00Z (exclusive end of the window)."""
        return self.start_s + DAY_S

    @property
    def series_start_s(self) -> int:
        """Series begin at D-1 22:00Z so look-backs and ``offset`` before the window find data."""
        return self.start_s - LOOKBACK_S

    @property
    def series_end_s(self) -> int:
        """Series end at D+1 00:30Z so an instant query at the window end has fresh samples."""
        return self.end_s + TAIL_S

    def scrapes(self) -> list[int]:
        """Every scrape time (unix seconds) of the series span, both ends included."""
        return list(range(self.series_start_s, self.series_end_s + 1, SCRAPE_S))

    def at(self, hhmmss: str, day_offset: int = 0) -> int:
        """Unix seconds of ``HH:MM[:SS]`` UTC on the window's day (or a neighbouring one)."""
        parts = [int(p) for p in hhmmss.split(":")]
        while len(parts) < 3:
            parts.append(0)
        return self.start_s + day_offset * DAY_S + parts[0] * 3_600 + parts[1] * 60 + parts[2]

    def in_window(self, t: int) -> bool:
        """Whether ``t`` falls in ``[D 00:00Z, D+1 00:00Z)``."""
        return self.start_s <= t < self.end_s


def iso(t: int) -> str:
    """Format unix seconds as ``2026-07-20T06:15:00Z``."""
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def day_start(d: dt.date) -> int:
    """Unix seconds of ``d`` 00:00Z."""
    return calendar.timegm(d.timetuple())


def stable_digest(*parts: str) -> bytes:
    """Return the SHA-256 of ``parts`` joined by the unit separator: the root of every stable id and choice."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()


def salt_of(*parts: str) -> int:
    """Return a stable 32-bit integer for a name (seeds every deterministic choice)."""
    return int.from_bytes(stable_digest(*parts)[:4], "big")


def safe_token(length: int, *parts: str) -> str:
    """Return ``length`` characters of Kubernetes' safe alphabet, derived from ``parts``."""
    raw = stable_digest(*parts)
    while len(raw) < length:
        raw += stable_digest(raw.hex())
    return "".join(SAFE_ALPHABET[b % len(SAFE_ALPHABET)] for b in raw[:length])


def stable_uid(*parts: str) -> str:
    """Return a UUIDv4-shaped id (what the API server assigns to a pod)."""
    h = stable_digest("uid", *parts).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) % 4]}{h[17:20]}-{h[20:32]}"


def container_id(*parts: str) -> str:
    """Return a containerd container id (64 hex characters)."""
    return stable_digest("cid", *parts).hex()


# Pod IPs: 10.42.<node>.<workload base + slot> (k3s' default pod CIDR). Disjoint bases keep every address unique.
_IP_BASE = {
    "feeds/feed-aggregator": 10,
    "shop/api": 20,
    "shop/web": 30,
    "monitoring/victoria-metrics": 40,
    "logging/vector": 50,
    f"{ENVOY_NAMESPACE}/{ENVOY_DEPLOYMENT}": 60,
    "shop/status-page": 70,
    "pricing/pricing": 80,
}


def pod_ip(workload_key: str, node: str, slot: int) -> str:
    """Return the pod IP for slot ``slot`` of a workload on ``node``."""
    return f"10.42.{NODE_INDEX[node]}.{_IP_BASE[workload_key] + slot}"


# The nodes' addresses on the home LAN, as kube-state-metrics' kube_node_info{internal_ip} reports them.
NODE_IPS = {"pi5-1": "192.168.1.21", "pi5-2": "192.168.1.22", "pi5-3": "192.168.1.23"}
