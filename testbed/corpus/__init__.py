"""The incident corpus: generated exporter series and Vector log records for each incident day.

``DAYS`` maps each incident day (a UTC calendar day) to its generator; ``day(d)`` looks one up. Generation is
pure (no HTTP, no backend): the loader sends ``series()`` to VictoriaMetrics and ``log_chunks()`` to
VictoriaLogs, and the golden tests compare the digest with ``expected``. See README.md for what each day
contains and why its numbers are what they are.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import cast

from digest.testbed.corpus.calm_day import CalmDay
from digest.testbed.corpus.conntrack_near_full import ConntrackNearFull
from digest.testbed.corpus.keepalive_fixed import KeepaliveFixed
from digest.testbed.corpus.keepalive_race import KeepaliveRace
from digest.testbed.corpus.model import CorpusDay, Expected, Series
from digest.testbed.corpus.node_not_ready import NodeNotReady
from digest.testbed.corpus.quiet_endpoints import QuietEndpoints
from digest.testbed.corpus.readiness_spiral import ReadinessSpiral
from digest.testbed.corpus.reconnect_storm import ReconnectStorm
from digest.testbed.corpus.recreate_beside_rolling import RecreateBesideRolling
from digest.testbed.corpus.recreate_rollout import RecreateRollout
from digest.testbed.corpus.spiral_unscraped import SpiralUnscraped
from digest.testbed.corpus.stuck_rollout import StuckRollout

__all__ = ["DAYS", "CorpusDay", "Expected", "Series", "day", "scaled", "suite_volume_scale"]


def _all_days() -> dict[dt.date, CorpusDay]:
    days: list[CorpusDay] = [
        CalmDay(),
        ReconnectStorm(),
        ReadinessSpiral(),
        KeepaliveRace(),
        KeepaliveFixed(),
        RecreateRollout(),
        QuietEndpoints(),
        ConntrackNearFull(),
        SpiralUnscraped(),
        RecreateBesideRolling(),
        StuckRollout(),
        NodeNotReady(),
    ]
    return {d.date: d for d in days}


DAYS: dict[dt.date, CorpusDay] = _all_days()


def day(d: dt.date) -> CorpusDay:
    """Return the corpus day for ``d``; raise ``KeyError`` naming the known days if there is none."""
    try:
        return DAYS[d]
    except KeyError:
        known = ", ".join(f"{x.isoformat()} ({DAYS[x].name})" for x in sorted(DAYS))
        raise KeyError(f"no corpus day for {d.isoformat()}; known days: {known}") from None


def scaled(one: CorpusDay, scale: float) -> CorpusDay:
    """The day with its storm volume scaled, for days that have one (the others are small)."""
    with_volume_scale = getattr(one, "with_volume_scale", None)
    return cast("CorpusDay", with_volume_scale(scale)) if callable(with_volume_scale) else one


def suite_volume_scale() -> float:
    """The test suite's storm volume (``DIGEST_TEST_VOLUME_SCALE``, 0.05 unless set): its snapshots are of it.

    The storm's non-error lines are scaled (the error count stays exact at any scale); the demo loads the full volume.
    """
    return float(os.environ.get("DIGEST_TEST_VOLUME_SCALE", "0.05"))
