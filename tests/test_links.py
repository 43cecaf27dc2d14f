"""Links in the HTML digest: every check and top offender opens a query that runs on the real backend and finds it.

The digest of each day below is computed on the suite's VictoriaMetrics + VictoriaLogs with VMUI and VictoriaLogs'
UI configured (both served by the backends themselves). Each link is read back as the UI would read it
(`tests.link_queries`), its query is sent to the backend over its window, and the answer must name the offender: a
series with its namespace/pod/container (or the one node), or log lines of its namespace (or of its flag). Grafana
Explore links are checked the same way on Prometheus + Loki, scoped to one cluster, in test_cluster_scope.
"""

from __future__ import annotations

import html
import json
from datetime import date
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import pytest

from digest.app.engine import Config, make_digest
from digest.app.settings import load_settings
from digest.output.links import LinkMaker
from digest.output.render import Renderer
from digest.pipeline.policy import Policy
from digest.pipeline.window import day_window
from digest.testbed.embedded import EmbeddedBackends
from tests.link_queries import identity, metrics_series, query_of, victorialogs_lines

# The storm (error lines, OOM, conntrack, memory, log storm, restarts), the recreate rollout (Envoy UH, empty
# endpoints, deployments, readiness) and the readiness spiral (readiness, CPU throttling, alerts).
DAYS = [date(2026, 7, 20), date(2026, 9, 8), date(2026, 8, 12)]


@pytest.mark.parametrize("day", DAYS, ids=str)
async def test_every_link_runs_and_finds_its_offender(corpus_backends: EmbeddedBackends, day: date) -> None:
    """Each check's link and its top offenders' open a query that, run on the backend, shows that offender."""
    settings = load_settings(
        vm_url=corpus_backends.metrics.url,
        vl_url=corpus_backends.logs.url,
        cluster="homelab",
        timezone="UTC",
        query_timeout=20.0,
        vmui_url=corpus_backends.metrics.url,
        victorialogs_ui_url=corpus_backends.logs.url,
    )
    digest = await make_digest(Config(settings=settings, policy=Policy()), day_window(day, settings.zone))
    page = Renderer(settings.links()).render(digest, "html")
    maker = settings.links()
    checked = 0
    for finding in digest.findings:
        looks = [(None, finding.look), *((offender, offender.look) for offender in finding.offenders[:3])]
        for offender, look in looks:
            for link in maker.links(look, digest.window, "x"):
                if finding not in (*digest.deductions, *digest.healthy, *digest.diagnoses):
                    continue  # a quiet diagnostic ("also fine") is named only, without its links
                assert f'href="{html.escape(link.url)}"' in page, (finding.name, link.url)
                query = query_of(link.url)
                if query.kind == "metrics":
                    series = metrics_series(corpus_backends.metrics.url, query)
                    assert series, (finding.name, query.query)
                    if offender is not None:
                        wanted = identity(offender)
                        matching = [one for one in series if wanted.items() <= one.items()]
                        assert matching if wanted else len(series) == 1, (finding.name, wanted, series[:3])
                else:
                    lines = victorialogs_lines(corpus_backends.logs.url, query)
                    assert lines, (finding.name, query.query)
                    if offender is not None and offender.labels.get("namespace"):
                        assert {line["kubernetes.pod_namespace"] for line in lines} == {offender.labels["namespace"]}
                    if offender is not None and offender.labels.get("flag"):
                        flags = {json.loads(line["_msg"]).get("response_flags") for line in lines}
                        assert flags == {offender.labels["flag"]}, (finding.name, flags)
                checked += 1
    assert checked >= 3


async def test_no_ui_configured_means_no_link(corpus_backends: EmbeddedBackends) -> None:
    """Without a UI setting the HTML digest carries no link at all (and the goldens stay as reviewed)."""
    settings = load_settings(
        vm_url=corpus_backends.metrics.url, vl_url=corpus_backends.logs.url, cluster="homelab", timezone="UTC"
    )
    digest = await make_digest(Config(settings=settings, policy=Policy()), day_window(DAYS[0], settings.zone))
    assert "<a " not in Renderer(settings.links()).render(digest, "html")


def test_a_paris_day_opens_at_its_own_instants_in_vmui() -> None:
    """A Europe/Paris day's VMUI link ends at 22:00 UTC read as VMUI reads g0.end_input (a UTC wall time), 24 h long.

    VMUI parses the parameter with ``dayjs(end).utcOffset(0, true)`` (utils/time.ts ``formatDateToLocal``): the wall
    time is UTC whatever zone the browser or VMUI's setting displays; the link must not carry Paris' wall time.
    """
    window = day_window(date(2026, 7, 20), ZoneInfo("Europe/Paris"))
    url = LinkMaker(vmui_url="http://vm.example:8428").metrics_url("up", window)
    assert url is not None
    parameters = parse_qs(urlsplit(url).fragment.removeprefix("/?"))
    assert parameters["g0.end_input"] == ["2026-07-20T22:00:00"]  # 2026-07-21 00:00 in Paris
    assert parameters["g0.range_input"] == ["86400s"]
