"""Reading a digest's links back: the query and window inside each, run against the real backend it points at.

What a reader's browser would do when they tap a link, minus the browser: the URL is taken apart the way its UI
takes it apart (Grafana Explore's ``panes`` JSON, VMUI's and Prometheus' ``g0.*`` parameters, VictoriaLogs' UI's
``query``), and the query is sent to the backend over the link's window.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from digest.checks.contract import Offender

# The labels that name an offender's entity in the series a metrics link graphs.
_IDENTITY = ("namespace", "pod", "container", "deployment", "alertname")


@dataclass(frozen=True)
class LinkQuery:
    """The query inside a link, its language (``metrics`` or ``logs``), and the window it shows."""

    kind: str
    query: str
    start: datetime
    end: datetime


def query_of(url: str, logs_datasource: str = "logs") -> LinkQuery:
    """The query a UI link opens, as that UI reads it; AssertionError when the URL is not one the digest writes."""
    parts = urlsplit(url)
    if parts.path.endswith("/explore"):
        panes = json.loads(parse_qs(parts.query)["panes"][0])
        (pane,) = panes.values()
        start = datetime.fromtimestamp(int(pane["range"]["from"]) / 1000, UTC)
        end = datetime.fromtimestamp(int(pane["range"]["to"]) / 1000, UTC)
        kind = "logs" if pane["datasource"] == logs_datasource else "metrics"
        return LinkQuery(kind, pane["queries"][0]["expr"], start, end)
    if parts.path.endswith("/select/vmui/"):
        params = parse_qs(parts.fragment.removeprefix("/?"))
        start, end = _range(params)
        return LinkQuery("logs", params["query"][0], start, end)
    params = parse_qs(parts.fragment.removeprefix("/?") if parts.path.endswith("/vmui/") else parts.query)
    assert parts.path.endswith(("/vmui/", "/graph")), url
    start, end = _range(params)
    return LinkQuery("metrics", params["g0.expr"][0], start, end)


def _range(params: dict[str, list[str]]) -> tuple[datetime, datetime]:
    end = datetime.fromisoformat(params["g0.end_input"][0]).replace(tzinfo=UTC)
    seconds = int(params["g0.range_input"][0].removesuffix("s"))
    assert params["g0.relative_time"] == ["none"]
    return end - timedelta(seconds=seconds), end


def metrics_series(base_url: str, link: LinkQuery) -> list[dict[str, str]]:
    """The labels of the series the link's expression graphs over its window (5-minute steps)."""
    response = httpx.post(
        f"{base_url}/api/v1/query_range",
        data={"query": link.query, "start": link.start.isoformat(), "end": link.end.isoformat(), "step": "300"},
        timeout=60.0,
    )
    assert response.status_code == 200, response.text
    return [item["metric"] for item in response.json()["data"]["result"]]


def victorialogs_lines(base_url: str, link: LinkQuery) -> list[dict[str, Any]]:
    """The records the link's LogsQL returns (the query carries its own absolute time filter)."""
    response = httpx.post(f"{base_url}/select/logsql/query", data={"query": link.query}, timeout=60.0)
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def loki_streams(base_url: str, link: LinkQuery) -> list[dict[str, Any]]:
    """The streams (labels and lines) the link's LogQL returns over its window, at most 20 lines."""
    response = httpx.get(
        f"{base_url}/loki/api/v1/query_range",
        params={
            "query": link.query,
            "start": str(int(link.start.timestamp() * 1e9)),
            "end": str(int(link.end.timestamp() * 1e9)),
            "limit": "20",
        },
        timeout=120.0,
    )
    assert response.status_code == 200, response.text
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


def identity(offender: Offender) -> dict[str, str]:
    """The labels a series of this offender carries whatever the check (empty for a node, which is an instance)."""
    found = {key: offender.labels[key] for key in _IDENTITY if offender.labels.get(key)}
    return found
