"""Normal behaviour over time, and the exact plans that spread a day's volume over its minutes.

Baselines are functions of absolute time (the users' day, memory, conntrack, closed-form CFS counters), so adjacent
days agree where their series overlap. Plans split a count over minutes with cumulative rounding, so every count
that lands in ``Expected.facts`` is exact before any line is rendered.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from digest.testbed.corpus.identity import DAY_S, MINUTES, NODES, SCRAPE_S, Window, salt_of
from digest.testbed.corpus.objects import CfsFn

# Share of a European homelab's peak traffic per UTC hour (value at the middle of the hour).
USER_PROFILE = (
    0.34,
    0.24,
    0.17,
    0.13,
    0.12,
    0.16,
    0.28,
    0.45,
    0.60,
    0.68,
    0.72,
    0.76,
    0.80,
    0.78,
    0.75,
    0.77,
    0.83,
    0.92,
    1.00,
    1.00,
    0.94,
    0.82,
    0.63,
    0.46,
)


def user_profile(t: float) -> float:
    """Traffic share (0.12-1.0) at unix time ``t``, interpolated between hour centres."""
    x = (t % DAY_S) / 3_600.0 - 0.5
    i = math.floor(x)
    f = x - i
    return USER_PROFILE[i % 24] * (1.0 - f) + USER_PROFILE[(i + 1) % 24] * f


def flat_profile(t: float) -> float:
    """Constant profile for scheduled work (collectors, pool stats)."""
    del t
    return 1.0


def wobble(t: int, salt: int) -> float:
    """Deterministic noise in [-1, 1] for the 30 s step containing ``t`` (same value on every day that has it)."""
    x = ((t // SCRAPE_S) * 2_654_435_761 + salt * 97_531) % 1_000_003
    return x / 500_001.5 - 1.0


def memory_baseline(t: int, base: float, salt: int) -> float:
    """Working set of a steady container: ±3 % diurnal drift plus ±1 % scrape noise."""
    phase = (salt % 628) / 100.0
    return float(round(base * (1.0 + 0.03 * math.sin(2 * math.pi * t / DAY_S + phase) + 0.01 * wobble(t, salt))))


_CONNTRACK_BASE = {"pi5-1": (2_600, 1_500), "pi5-2": (3_400, 1_300), "pi5-3": (2_300, 1_100)}
_CONNTRACK_SALT = {node: salt_of("conntrack", node) for node in NODES}


def conntrack_baseline(node: str, t: int) -> int:
    """Return the normal conntrack entries of a node: a few thousand, following the users' day."""
    base, amp = _CONNTRACK_BASE[node]
    return int(base + amp * user_profile(t) + 120 * wobble(t, _CONNTRACK_SALT[node]))


def cfs_baseline(start_s: int, salt: int, busy: float, throttled_ratio: float) -> CfsFn:
    """Closed-form CFS counters of a container with a CPU limit (100 ms periods, diurnal activity).

    ``busy`` is the average share of periods in which the container ran; closed form keeps adjacent days equal.
    """
    omega = 2 * math.pi / DAY_S
    peak = 19 * 3_600 + salt % 3_600
    a0 = busy
    a1 = busy * 0.6

    def integral(t: float) -> float:
        wave = math.sin(omega * (t - peak)) - math.sin(omega * (start_s - peak))
        return 10.0 * (a0 * (t - start_s) + (a1 / omega) * wave)

    def counters(times: Sequence[int]) -> tuple[list[float], list[float]]:
        periods = [float(math.floor(integral(t))) for t in times]
        throttled = [float(math.floor(p * throttled_ratio)) for p in periods]
        return periods, throttled

    return counters


def allocate(total: int, weights: Sequence[int]) -> list[int]:
    """Split ``total`` over ``weights`` exactly (cumulative rounding: the parts always sum to ``total``)."""
    wsum = sum(weights)
    if wsum <= 0:
        if total:
            raise ValueError(f"cannot place {total} items on zero weights")
        return [0] * len(weights)
    out: list[int] = []
    acc = 0
    prev = 0
    for wgt in weights:
        acc += wgt
        cur = total * acc // wsum
        out.append(cur - prev)
        prev = cur
    return out


def minute_rates(w: Window, profile: Callable[[float], float]) -> tuple[float, ...]:
    """Return a rate profile's value at the middle of each minute of the window."""
    return tuple(profile(w.start_s + m * 60 + 30) for m in range(MINUTES))


def minute_weights(
    w: Window, profile: Callable[[float], float], lo: int = 0, hi: int = DAY_S, rates: Sequence[float] | None = None
) -> list[int]:
    """Return the integer weight of each minute of the window for a rate profile, within window seconds ``[lo, hi)``.

    ``rates`` (from ``minute_rates``) saves re-evaluating the profile when a day plans many sources.
    """
    if rates is None:
        rates = minute_rates(w, profile)
    if lo <= 0 and hi >= DAY_S:
        return [round(60_000 * r) for r in rates]
    out = [0] * MINUTES
    for m in range(max(0, lo // 60), min(MINUTES, -(-hi // 60))):
        a = max(lo, m * 60)
        b = min(hi, m * 60 + 60)
        if b > a:
            out[m] = round(1_000 * rates[m] * (b - a))
    return out


def share(c: int, s: int, lo: int, hi: int) -> int:
    """How many of a minute's ``c`` items fall in second ``s`` when spread evenly over ``[lo, hi)`` ∩ minute."""
    m0 = s - s % 60
    a = max(lo, m0)
    b = min(hi, m0 + 60)
    span = b - a
    i = s - a
    return (c * (i + 1)) // span - (c * i) // span
