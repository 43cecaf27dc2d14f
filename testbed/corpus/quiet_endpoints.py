"""2026-09-15, quiet endpoints (write-up 004): a flat 0.05 % of 503 UC, only where traffic is low.

Istio 1.21 sidecars (upstream idle timeout 1 h) in front of a Go server with ``IdleTimeout: 60s``. A connection
that sits idle for about 60 s is closed by the server while the sidecar still believes it is good; a request
written into it at that instant is lost and Envoy reports ``503`` with response flag ``UC``. Busy connections
never idle that long, so the failures hit the quiet service only, and hit it hardest when it is quietest.

What the day contains: namespace ``pricing``, Deployment ``pricing`` (3 pods, containers ``pricing`` and
``istio-proxy``, onboarded to the mesh three weeks earlier), selected by the Services ``pricing``, ``quote`` and
``catalog`` (all with full EndpointSlices all day: this is not UH). ``istio_requests_total`` with
``reporter="destination"``, one series per destination pod and outcome:

* ``quote`` (called by ``api``): 2-15 req/s following the users' day, lowest at 04:00Z; exactly
  ``round(0.05 % of its requests)`` answered ``503``/``UC`` over the day, spread so that the per-hour failure
  ratio is highest at 04:00-05:00 and lowest at the evening peak (the inversion, published per hour in the facts);
* ``catalog`` (called by ``web``): 200-800 req/s, zero UC (no UC series at all: Istio creates a label set at its
  first request).

The UC ratio must be read per destination service: over all Istio traffic it is below 0.001 %, invisible, and
that is the point of the write-up. Sidecar access logs are off (Istio's default), so UC shows only in the metric;
Envoy Gateway's logs are normal.

Expected: WARNING 9/10 (UC ratio ≥ 0.01 % on ``quote``: -1); the strongest hint is the inversion.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from digest.testbed.corpus.baselines import allocate, flat_profile, user_profile
from digest.testbed.corpus.homelab import Homelab, HomelabDay
from digest.testbed.corpus.identity import GIB, MIB, MINUTES, Window, salt_of
from digest.testbed.corpus.model import Series
from digest.testbed.corpus.objects import Container, Deployment, Pod, Service, deployment_pod, revision_start
from digest.testbed.corpus.pod_logs import LogSource, Template, TemplateGroup, spread_events

UC_RATIO = 0.0005
QUOTE_MIN, QUOTE_MAX = 2.0, 15.0
CATALOG_MIN, CATALOG_MAX = 200.0, 800.0
PROFILE_MIN, PROFILE_MAX = 0.12, 1.0
REVISION = "2026-08-25"

PRICING_LINES = (
    Template(
        "quote cache warm: {0} entries, {1} price lists",
        stream="stdout",
        level="INFO",
        ranges=((1_800, 2_400), (11, 14)),
    ),
)
PROXY_LINES = (
    Template(
        "{ts}\tinfo\txdsproxy\tconnected to delta upstream XDS server: istiod.istio-system.svc:15012 id={0}",
        ranges=((1, 400),),
    ),
)


def _rate(t: float, lo: float, hi: float) -> float:
    q = (user_profile(t) - PROFILE_MIN) / (PROFILE_MAX - PROFILE_MIN)
    return lo + (hi - lo) * q


class QuietEndpoints(HomelabDay):
    """The Istio UC day."""

    date = dt.date(2026, 9, 15)
    name = "quiet-endpoints"
    title = "Quiet endpoints: 0.05 % of 503 UC on pricing/quote (2-15 req/s), none on the busy catalog"
    status = "WARNING"
    score = 9

    def customise(self, lab: Homelab) -> None:
        """Add the pricing Deployment and its three Services, and plan the requests."""
        containers = (
            Container("pricing", "ghcr.io/homelab/pricing:2.8.0", 60 * MIB, memory_limit=256 * MIB),
            Container(
                "istio-proxy", "docker.io/istio/proxyv2:1.21.6", 70 * MIB, memory_limit=GIB, probes=("Readiness",)
            ),
        )
        for i, node in enumerate(("pi5-1", "pi5-2", "pi5-3")):
            lab.pods.append(
                deployment_pod("pricing", "pricing", REVISION, i, node, containers, revision_start(REVISION))
            )
        lab.services.extend(Service("pricing", name, "pricing", 8080) for name in ("pricing", "quote", "catalog"))
        lab.deployments.append(Deployment("pricing", "pricing", 3))
        self.quote_plan = self._plan_for(QUOTE_MIN, QUOTE_MAX)
        self.catalog_plan = self._plan_for(CATALOG_MIN, CATALOG_MAX)
        self.uc_by_hour = self._uc_by_hour()
        self.uc_seconds = sorted(
            s
            for h, n in enumerate(self.uc_by_hour)
            for s, _ in spread_events(n, h * 3_600, h * 3_600 + 3_600, salt_of("uc", str(h)))
        )

    def _plan_for(self, lo: float, hi: float) -> list[int]:
        w = self.window
        weights = [int(_rate(w.start_s + m * 60 + 30, lo, hi) * 60 * 1_000) for m in range(MINUTES)]
        return allocate(round(sum(weights) / 1_000), weights)

    def _uc_by_hour(self) -> list[int]:
        requests = [sum(self.quote_plan[h * 60 : (h + 1) * 60]) for h in range(24)]
        total_uc = round(sum(requests) * UC_RATIO)
        peak = max(requests)
        # An idle connection reaches the server's 60 s timeout more often when the service is quiet: the failure
        # ratio grows as traffic falls (the write-up's inverse load dependence).
        weights = [int(r * (peak / r) ** 1.3 * 1_000) for r in requests]
        out = allocate(total_uc, weights)
        ratios = [u / r for u, r in zip(out, requests, strict=True)]
        if ratios.index(max(ratios)) != 4:
            raise ValueError(f"the quiet hour must be the worst: {ratios}")
        return out

    def quote_requests_by_hour(self) -> list[int]:
        """Count requests to quote per UTC hour of the window."""
        return [sum(self.quote_plan[h * 60 : (h + 1) * 60]) for h in range(24)]

    def build_extra_series(self, lab: Homelab) -> list[Series]:
        """``istio_requests_total`` as the destination sidecars report it."""
        w = self.window
        pods = lab.workload("pricing/pricing")
        out: list[Series] = []
        uc_per_pod = [[s for i, s in enumerate(self.uc_seconds) if i % len(pods) == k] for k in range(len(pods))]
        for svc, source, plan, lo, hi in (
            ("quote", "api", self.quote_plan, QUOTE_MIN, QUOTE_MAX),
            ("catalog", "web", self.catalog_plan, CATALOG_MIN, CATALOG_MAX),
        ):
            per_pod = _split_counter(w, plan, lo, hi, len(pods))
            for k, p in enumerate(pods):
                ucs = uc_per_pod[k] if svc == "quote" else []
                uc_cum = _uc_cumulative(w, ucs, salt_of(p.uid, "uc-history"))
                base = 1_000_000 * (3 if svc == "catalog" else 1) + salt_of(p.uid, svc) % 100_000
                ok = [base + r - u for r, u in zip(per_pod[k], uc_cum, strict=True)]
                out.append(_istio(w, p, svc, source, "200", "-", ok))
                if svc == "quote":
                    uc_base = 180 + salt_of(p.uid, "uc") % 40
                    out.append(_istio(w, p, svc, source, "503", "UC", [uc_base + u for u in uc_cum]))
        return out

    def extra_logs(self, lab: Homelab) -> list[LogSource]:
        """Plan the pricing pods' own lines (the sidecars' access logs are off, as by default)."""
        out: list[LogSource] = []
        for p in lab.workload("pricing/pricing"):
            out.extend(
                self._runs(
                    p, "pricing", [TemplateGroup(PRICING_LINES, self._plan(p, "pricing", 1_440, flat_profile))], []
                )
            )
            out.extend(
                self._runs(p, "istio-proxy", [TemplateGroup(PROXY_LINES, self._plan(p, "proxy", 24, flat_profile))], [])
            )
        return out

    def day_facts(self) -> dict[str, object]:
        """Per-service totals and the per-hour inversion."""
        quote = sum(self.quote_plan)
        catalog = sum(self.catalog_plan)
        uc = sum(self.uc_by_hour)
        by_hour = self.quote_requests_by_hour()
        ratios = [round(100 * u / r, 4) for u, r in zip(self.uc_by_hour, by_hour, strict=True)]
        return {
            "istio_requests.pricing/quote": quote,
            "istio_uc.pricing/quote": uc,
            "istio_uc_ratio_percent.pricing/quote": round(100 * uc / quote, 3),
            "istio_requests.pricing/catalog": catalog,
            "istio_uc.pricing/catalog": 0,
            "istio_uc_ratio_percent.pricing/catalog": 0.0,
            "istio_uc_ratio_percent_all_services": round(100 * uc / (quote + catalog), 5),
            "istio_requests_by_hour.pricing/quote": by_hour,
            "istio_uc_by_hour.pricing/quote": list(self.uc_by_hour),
            "istio_uc_ratio_percent_by_hour.pricing/quote": ratios,
            "istio_uc_worst_hour.pricing/quote": ratios.index(max(ratios)),
        }


def _split_counter(w: Window, plan: Sequence[int], lo: float, hi: float, pods: int) -> list[list[int]]:
    """Cumulative requests per destination pod at each scrape, from 0 at the first scrape.

    Inside the window the counts follow the minute plan exactly (so the increase over the window is the plan's
    total); before and after it, the same rate curve rounded per 30 s step.
    """
    times = w.scrapes()
    prefix = [0]
    for c in plan:
        prefix.append(prefix[-1] + c)

    def done(t: int) -> int:
        m, j = divmod(t - w.start_s, 60)
        return prefix[m] + (plan[m] * j) // 60 if m < MINUTES else prefix[-1]

    per_pod: list[list[int]] = [[0] for _ in range(pods)]
    for i in range(1, len(times)):
        t0, t1 = times[i - 1], times[i]
        if w.start_s <= t0 and t1 <= w.end_s:
            inc = done(t1) - done(t0)
        else:
            inc = round(_rate((t0 + t1) / 2, lo, hi) * (t1 - t0))
        parts = allocate(inc, [1] * pods)
        # Rotate who gets the remainder so no pod is favoured.
        parts = parts[i % pods :] + parts[: i % pods]
        for k in range(pods):
            per_pod[k].append(per_pod[k][-1] + parts[k])
    return per_pod


def _uc_cumulative(w: Window, window_seconds: Sequence[int], salt: int) -> list[int]:
    """UC resets before each scrape: the window's planned ones plus the same flat rate around it."""
    history = [w.start_s - 7_200 + (salt + i * 1_237) % 7_200 for i in range(24)]
    tail = [w.end_s + (salt + i * 911) % 1_800 for i in range(3)]
    events = sorted([*history, *(w.start_s + s for s in window_seconds), *tail])
    out: list[int] = []
    j = 0
    for t in w.scrapes():
        while j < len(events) and events[j] < t:
            j += 1
        out.append(j - len(history))
    return out


def _istio(w: Window, p: Pod, svc: str, source: str, code: str, flags: str, values: Sequence[int]) -> Series:
    labels = {
        "__name__": "istio_requests_total",
        "job": "kubernetes-pods",
        "instance": f"{p.ip}:15020",
        "namespace": p.namespace,
        "pod": p.name,
        "reporter": "destination",
        "source_workload": source,
        "destination_workload": "pricing",
        "destination_service_name": svc,
        "destination_service_namespace": "pricing",
        "destination_service": f"{svc}.pricing.svc.cluster.local",
        "request_protocol": "http",
        "response_code": code,
        "response_flags": flags,
        "connection_security_policy": "mutual_tls",
    }
    times = w.scrapes()
    return Series(labels=labels, timestamps_ms=[t * 1_000 for t in times], values=[float(v) for v in values])
