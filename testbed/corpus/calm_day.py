"""2026-07-19, calm day: the homelab's normal Sunday, the day before the reconnect storm.

Nothing happens, and the day exists to prove it: no restart, no OOM, no 5xx, no flag in the gateway's access log,
conntrack at a few thousand entries per node, no alert. The only error lines are the 12 genuine ones the feed
aggregator wrote on a normal pre-fix day (SQLite locks, a reset connection, a job timeout) and 2 template failures
in shop/web, far below the 50,000 that cost a point. Rule traps are present on purpose: ``(0 errors)``,
``error_count=0``, and structured records whose message says "error" under a ``warning``/``info`` level.
The digest must say OK 10/10.

Pods and node baselines are shared with 2026-07-20, so the two days agree where their series overlap.
"""

from __future__ import annotations

import datetime as dt

from digest.testbed.corpus.homelab import HomelabDay


class CalmDay(HomelabDay):
    """The normal day before the storm."""

    date = dt.date(2026, 7, 19)
    name = "calm-day"
    title = "Calm Sunday before the storm: normal traffic, no restart, no 5xx, no alert"
    status = "OK"
    score = 10
