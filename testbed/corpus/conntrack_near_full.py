"""2026-10-05, conntrack near full: pi5-3's table peaks at 126,484 / 131,072 (96.5 %) with 1,204 early drops.

In the evening a burst of short-lived connections through pi5-3 filled its conntrack table: from the usual
2-4 thousand entries it climbed from 18:20Z to a peak of exactly 126,484 entries at 19:40:00Z (96.5 % of the
131,072 limit) and was back to normal by 20:45Z. Between scrapes the table touched its limit, and the kernel
evicted non-assured entries to make room: ``node_nf_conntrack_stat_early_drop`` rises by 1,204 over the scrapes
where the table is at 95 % or more; ``node_nf_conntrack_stat_drop`` stays flat (every insert found room). No pod
shows it (no restart, no 5xx, nothing in the logs): only the node-level check can see this day.

The ``ConntrackNearFull`` rule added after 2026-07-20 (above 80 % for 5 minutes, group ``platform``) fired once;
vmalert wrote ``ALERTS`` (pending, then firing) and ``ALERTS_FOR_STATE`` for it.

Expected: CRITICAL 8/10 (conntrack ≥ 95 % or drops: -2).
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Sequence

from digest.testbed.corpus.baselines import allocate, conntrack_baseline
from digest.testbed.corpus.homelab import Homelab, HomelabDay
from digest.testbed.corpus.identity import SCRAPE_S, iso
from digest.testbed.corpus.model import Series
from digest.testbed.corpus.objects import CONNTRACK_LIMIT, NodeModel
from digest.testbed.corpus.series import alert_series

NODE = "pi5-3"
PEAK_ENTRIES = 126_484
PEAK_AT = "19:40:00"
EARLY_DROPS = 1_204
ALERT_THRESHOLD = 0.80
ALERT_FOR_S = 300

KNOTS = (
    ("18:20", 0),
    ("18:50", 20_000),
    ("19:10", 70_000),
    ("19:25", 110_000),
    ("19:40", 123_000),
    ("19:55", 112_000),
    ("20:10", 60_000),
    ("20:30", 8_000),
    ("20:45", 0),
)


class ConntrackNearFull(HomelabDay):
    """The node-level day."""

    date = dt.date(2026, 10, 5)
    name = "conntrack-near-full"
    title = "Conntrack near full on pi5-3: 126,484 / 131,072 (96.5 %) at 19:40, 1,204 early drops"
    status = "CRITICAL"
    score = 8

    def customise(self, lab: Homelab) -> None:
        """Replace pi5-3's conntrack curve and early-drop counter."""
        w = self.window
        knots = [(w.at(t), v) for t, v in KNOTS]
        peak_t = w.at(PEAK_AT)

        def entries(t: int) -> int:
            if t == peak_t:
                return PEAK_ENTRIES
            value = conntrack_baseline(NODE, t) + round(_interp(t, knots))
            return min(value, PEAK_ENTRIES - 41 - abs(t - peak_t) // SCRAPE_S)

        hot = [t for t in range(w.start_s, w.end_s, SCRAPE_S) if entries(t) >= 0.95 * CONNTRACK_LIMIT]
        drops = allocate(EARLY_DROPS, [entries(t) - int(0.95 * CONNTRACK_LIMIT) + 1 for t in hot])
        # Counted at the scrape after the drops happened; cumulative since boot (a few from earlier days).
        steps = sorted(zip([t + SCRAPE_S for t in hot], drops, strict=True))
        before = 37

        def early_drop(t: int) -> int:
            return before + sum(n for at, n in steps if at <= t)

        lab.nodes[NODE] = NodeModel(NODE, conntrack=entries, early_drop=early_drop)
        self.hot_scrapes = hot

    def build_extra_series(self, lab: Homelab) -> list[Series]:
        """Build vmalert's ConntrackNearFull alert for pi5-3."""
        node = lab.nodes[NODE]
        labels = {"instance": f"{NODE}:9100", "job": "node-exporter"}
        series, episodes = alert_series(
            self.window,
            "ConntrackNearFull",
            "platform",
            "warning",
            labels,
            lambda t: node.conntrack(t) / CONNTRACK_LIMIT > ALERT_THRESHOLD,
            ALERT_FOR_S,
        )
        self.extra_facts.update(
            {
                "alerts_fired": 1,
                "alerts_fired.ConntrackNearFull": len(episodes),
                "alert_firing_from.ConntrackNearFull": [iso(a) for a, _ in episodes],
                "alert_firing_minutes.ConntrackNearFull": sum((b - a + SCRAPE_S) // 60 for a, b in episodes),
            }
        )
        return series

    def day_facts(self) -> dict[str, object]:
        """Return the early drops and how many scrapes saw the table at 95 % or more."""
        return {
            f"conntrack_early_drops.{NODE}": EARLY_DROPS,
            f"conntrack_scrapes_at_or_above_95_percent.{NODE}": len(self.hot_scrapes),
        }


def _interp(t: int, knots: Sequence[tuple[int, int]]) -> float:
    if t <= knots[0][0] or t >= knots[-1][0]:
        return 0.0
    for (x0, y0), (x1, y1) in itertools.pairwise(knots):
        if x0 <= t <= x1:
            return y0 + (y1 - y0) * (t - x0) / (x1 - x0)
    return 0.0
