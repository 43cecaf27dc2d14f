"""Corpus days as clusters of one shared store: every series and log record labelled with its cluster.

A central VictoriaMetrics or Prometheus gets each cluster's series with a ``cluster`` label (an external label, or
vmagent's ``-remoteWrite.label``); a shared VictoriaLogs gets it as a stream field, a shared Loki as a stream label.
`InCluster` hands a day to the loaders that way, so a test can put two clusters' days in one store and check that a
digest scoped to one sees exactly what it would see alone. `on_date` moves a homelab day to another date, so two
clusters can have different days on the same date.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from digest.testbed.corpus.homelab import HomelabDay
from digest.testbed.corpus.model import CorpusDay, Expected, Series

_RECORD_START = re.compile(rb"(?m)^\{")


@dataclass(frozen=True)
class InCluster:
    """``day`` as cluster ``cluster`` of a shared store: its series and records carry ``cluster=<name>``."""

    day: CorpusDay
    cluster: str
    label: str = "cluster"

    @property
    def date(self) -> dt.date:
        return self.day.date

    @property
    def name(self) -> str:
        return f"{self.day.name}@{self.cluster}"

    @property
    def title(self) -> str:
        return self.day.title

    @property
    def expected(self) -> Expected:
        return self.day.expected

    def series(self) -> Iterator[Series]:
        """The day's series, each with the cluster label."""
        for item in self.day.series():
            yield Series({**item.labels, self.label: self.cluster}, item.timestamps_ms, item.values)

    def log_chunks(self) -> Iterator[bytes]:
        """The day's records, each with a top-level cluster field (a stream field for VictoriaLogs)."""
        field = b"{%b:%b," % (json.dumps(self.label).encode(), json.dumps(self.cluster).encode())
        for chunk in self.day.log_chunks():
            yield _RECORD_START.sub(field, chunk)

    def log_line_count(self) -> int:
        return self.day.log_line_count()


def on_date(day: type[HomelabDay], date: dt.date) -> HomelabDay:
    """The homelab day ``day`` generated for ``date`` instead of its own (its model and expectations follow)."""
    moved: type[HomelabDay] = type(f"{day.__name__}On{date:%Y%m%d}", (day,), {"date": date})
    return moved()
