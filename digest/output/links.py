"""Links from the HTML digest to the UIs a reader has: Grafana Explore, VMUI, Prometheus' graph, VictoriaLogs' UI.

Every check and each of its top offenders says where to see it (`checks.contract.Look`): a PromQL expression to
graph, or the log backend's own query for the lines. This module turns a look into a URL a phone opens:

* **Grafana Explore** (``DIGEST_GRAFANA_URL`` with ``DIGEST_GRAFANA_METRICS_DATASOURCE`` and/or
  ``DIGEST_GRAFANA_LOGS_DATASOURCE``, the datasources' UIDs): ``/explore?schemaVersion=1&panes=…``, Grafana 10's
  URL format, one pane with the query and the window as absolute milliseconds — the same for a Prometheus,
  VictoriaMetrics, Loki or VictoriaLogs datasource, which all read the query from ``expr``;
* **VMUI** (``DIGEST_VMUI_URL``, VictoriaMetrics as the reader reaches it): ``/vmui/#/?g0.expr=…&g0.range_input=…
  &g0.end_input=…``;
* **Prometheus' own UI** (``DIGEST_PROMETHEUS_UI_URL``): ``/graph?g0.expr=…`` with the same parameters;
* **VictoriaLogs' UI** (``DIGEST_VICTORIALOGS_UI_URL``): ``/select/vmui/#/?query=…``; the LogsQL carries its own
  absolute ``_time`` filter, so the lines are the window's whatever the UI's time picker says.

Grafana is preferred where its datasource is set, then the backend's own UI; nothing configured, no link. The
expression is scoped to the cluster (`digest.backends.scope`) exactly as the digest's own queries were, so on a
shared store the link shows this cluster's series; the log query came from the log source, already scoped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC
from urllib.parse import quote

from digest.backends.scope import Matcher, scoped_promql
from digest.checks.contract import Look, Window


@dataclass(frozen=True)
class Link:
    """One link: the words shown and the URL."""

    label: str
    url: str


@dataclass(frozen=True)
class LinkMaker:
    """Builds the links of a digest from the UIs configured; build once from the settings, pass down."""

    grafana_url: str | None = None
    grafana_metrics_datasource: str | None = None
    grafana_logs_datasource: str | None = None
    grafana_org_id: int = 1
    vmui_url: str | None = None
    prometheus_ui_url: str | None = None
    victorialogs_ui_url: str | None = None
    metrics_scope: tuple[Matcher, ...] = ()

    @property
    def enabled(self) -> bool:
        """Whether any UI is configured (else the digest carries no link at all)."""
        return any((self.grafana_url, self.vmui_url, self.prometheus_ui_url, self.victorialogs_ui_url))

    def links(self, look: Look | None, window: Window, label: str) -> list[Link]:
        """The links of ``look`` (none when it has nothing a configured UI shows)."""
        if look is None:
            return []
        found = []
        if look.metrics:
            url = self.metrics_url(scoped_promql(look.metrics, self.metrics_scope), window)
            if url:
                found.append(Link(label, url))
        if look.logs:
            url = self.logs_url(look.logs, window)
            if url:
                found.append(Link(label if not found else f"{label} (logs)", url))
        return found

    def metrics_url(self, expression: str, window: Window) -> str | None:
        """Where ``expression`` is graphed over ``window``: Grafana Explore, else VMUI, else Prometheus' UI."""
        if self.grafana_url and self.grafana_metrics_datasource:
            return self._explore(self.grafana_url, self.grafana_metrics_datasource, expression, window)
        if self.vmui_url:
            return f"{self.vmui_url.rstrip('/')}/vmui/#/?{_graph_parameters(expression, window)}"
        if self.prometheus_ui_url:
            return f"{self.prometheus_ui_url.rstrip('/')}/graph?{_graph_parameters(expression, window)}"
        return None

    def logs_url(self, query: str, window: Window) -> str | None:
        """Where the lines of ``query`` are read: Grafana Explore, else VictoriaLogs' UI."""
        if self.grafana_url and self.grafana_logs_datasource:
            return self._explore(self.grafana_url, self.grafana_logs_datasource, query, window)
        if self.victorialogs_ui_url:
            return (
                f"{self.victorialogs_ui_url.rstrip('/')}/select/vmui/#/?query={quote(query, safe='')}"
                f"&{_range_parameters(window)}"
            )
        return None

    def _explore(self, grafana_url: str, datasource: str, expression: str, window: Window) -> str:
        pane = {
            "datasource": datasource,
            "queries": [{"refId": "A", "datasource": {"uid": datasource}, "expr": expression}],
            "range": {
                "from": str(int(window.start.timestamp() * 1000)),
                "to": str(int(window.end.timestamp() * 1000)),
            },
        }
        panes = json.dumps({"digest": pane}, separators=(",", ":"))
        return (
            f"{grafana_url.rstrip('/')}/explore?schemaVersion=1&orgId={self.grafana_org_id}"
            f"&panes={quote(panes, safe='')}"
        )


def _range_parameters(window: Window) -> str:
    # The window's end as a UTC wall time, which is how both UIs read g0.end_input whatever zone they display in:
    # VMUI parses it with dayjs(end).utcOffset(0, true) (utils/time.ts formatDateToLocal, read at VictoriaMetrics
    # b7ef6cc, 2026-08) and writes it back with formatDateToUTC; Prometheus' graph reads it as UTC. The instant is
    # right for a reader in any zone; each UI then shows it in the reader's own zone.
    end = window.end.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"g0.range_input={window.seconds}s&g0.end_input={quote(end)}&g0.relative_time=none"


def _graph_parameters(expression: str, window: Window) -> str:
    return f"g0.expr={quote(expression, safe='')}&g0.tab=0&{_range_parameters(window)}"
