"""The alert rules of deploy/alerts.yaml, checked by a real vmalert against a real VictoriaMetrics.

First ``vmalert -dryRun`` parses every rule (MetricsQL expressions, annotation templates). Then the rules are replayed
over three past days of the bot's metrics: ``digest_last_successful_delivery_timestamp_seconds`` with a delivery every
day around 12:00 UTC (one of them late) until the deliveries stop and later the bot itself disappears, and
``digest_deliveries_total`` with one failed delivery. They are imported into VictoriaMetrics, ``vmalert
-replay.timeFrom … -replay.timeTo …`` evaluates the rules over that range and writes the ``ALERTS`` series back into
the same VictoriaMetrics, and the tests read through the query API when each alert was pending and firing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml

from digest.testbed.embedded import EmbeddedBackends, free_port

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "alerts.yaml"
METRIC = "digest_last_successful_delivery_timestamp_seconds"
FIRST_USED = "digest_state_first_used_timestamp_seconds"
CHAT = "-100"

# The story replayed, all in UTC. Samples every 60 s from DATA_START to BOT_GONE (exclusive). The gauge holds the time
# of the last delivery: noon on the day before DATA_START, noon on 07-18, then a late post at 13:30 on 07-19 (25.5 h
# after the previous one: within the 26 h, so no alert), which is the LAST_DELIVERY. After it the bot is still up (the
# gauge is still scraped) but posts nothing; at BOT_GONE the bot disappears (no sample at all).
# The deliveries counter counts one `sent` per delivery and one `failed` at FAILURE.
DATA_START = datetime(2026, 7, 18, 0, 0, tzinfo=UTC)
DELIVERIES = (
    datetime(2026, 7, 17, 12, 0, tzinfo=UTC),
    datetime(2026, 7, 18, 12, 0, tzinfo=UTC),
    datetime(2026, 7, 19, 13, 30, tzinfo=UTC),
)
LAST_DELIVERY = DELIVERIES[-1]
FAILURE = datetime(2026, 7, 20, 12, 0, tzinfo=UTC)
BOT_GONE = datetime(2026, 7, 21, 6, 0, tzinfo=UTC)
REPLAY_FROM = DATA_START + timedelta(minutes=10)
REPLAY_TO = datetime(2026, 7, 22, 9, 0, tzinfo=UTC)
SCRAPE = timedelta(seconds=60)

# The install of the story's bot, long before it; the fresh install's story starts with its install at DATA_START.
INSTALLED = datetime(2026, 7, 1, 9, 0, tzinfo=UTC)
SILENCE = timedelta(hours=26)  # the threshold written in DigestNotDelivered and DigestMetricsAbsent
FOR = timedelta(minutes=5)  # their `for:`
EVALUATION = timedelta(minutes=1)  # the group's `interval:`
FAILURE_WINDOW = timedelta(hours=1)  # the range of DigestDeliveryFailures' increase()


def vmalert_binary() -> str:
    """Path of vmalert; the test fails (never skips) when it is missing."""
    path = shutil.which("vmalert")
    if path is None:
        pytest.fail("vmalert is not on PATH: run scripts/install-deploy-tools (Debian's victoria-metrics package)")
    return path


def last_delivery_at(moment: datetime) -> datetime:
    """The value of the gauge at ``moment``: the latest delivery not after it."""
    return max(delivery for delivery in DELIVERIES if delivery <= moment)


def scrape_times() -> list[datetime]:
    """Every scrape of the bot, from DATA_START until it disappears."""
    count = int((BOT_GONE - DATA_START) / SCRAPE)
    return [DATA_START + index * SCRAPE for index in range(count)]


def import_line(labels: dict[str, str], points: list[tuple[datetime, float]]) -> bytes:
    """One VictoriaMetrics /api/v1/import JSON line."""
    line = {
        "metric": labels,
        "values": [value for _, value in points],
        "timestamps": [int(moment.timestamp() * 1000) for moment, _ in points],
    }
    return json.dumps(line).encode() + b"\n"


def bot_metrics() -> list[bytes]:
    """The bot's series as a scraper would have stored them over the story."""
    times = scrape_times()
    gauge = [(moment, last_delivery_at(moment).timestamp()) for moment in times]
    sent = [(moment, float(sum(1 for delivery in DELIVERIES if DATA_START <= delivery <= moment))) for moment in times]
    failed = [(moment, 1.0 if moment >= FAILURE else 0.0) for moment in times]
    counter = "digest_deliveries_total"
    return [
        import_line({"__name__": METRIC, "chat": CHAT}, gauge),
        import_line({"__name__": FIRST_USED}, [(moment, INSTALLED.timestamp()) for moment in times]),
        import_line({"__name__": counter, "outcome": "sent"}, sent),
        import_line({"__name__": counter, "outcome": "failed"}, failed),
    ]


def fresh_install_metrics() -> list[bytes]:
    """A bot installed at DATA_START that is up and scraped all along and never delivers: no per-chat gauge at all."""
    times = scrape_times()
    return [
        import_line({"__name__": FIRST_USED}, [(moment, DATA_START.timestamp()) for moment in times]),
        import_line({"__name__": "digest_deliveries_total", "outcome": "sent"}, [(moment, 0.0) for moment in times]),
    ]


def wait_for_samples(backends: EmbeddedBackends, selector: str, expected: int, timeout_seconds: float = 60.0) -> None:
    """Poll (bounded) until VictoriaMetrics holds ``expected`` raw samples of ``selector`` over the whole story."""
    # The window (time - span, time] must include the first sample, at DATA_START exactly.
    span = int((BOT_GONE - DATA_START) / SCRAPE) + 1
    deadline = time.monotonic() + timeout_seconds
    seen = -1
    while time.monotonic() < deadline:
        response = httpx.post(
            f"{backends.metrics.url}/api/v1/query",
            data={"query": f"sum(count_over_time({selector}[{span}m]))", "time": str(int(BOT_GONE.timestamp()))},
            timeout=30.0,
        )
        result = response.json()["data"]["result"] if response.status_code == 200 else []
        seen = int(float(result[0]["value"][1])) if result else 0
        if seen >= expected:
            return
        httpx.get(f"{backends.metrics.url}/internal/force_flush", timeout=30.0)
        time.sleep(0.2)
    pytest.fail(f"VictoriaMetrics shows {seen} of {expected} samples of {selector} after {timeout_seconds:g} s")


@dataclass(frozen=True)
class Samples:
    """Raw samples of the ALERTS series of one alert in one state."""

    times: list[datetime]

    @property
    def first(self) -> datetime:
        assert self.times, "no sample"
        return self.times[0]


def alert_samples(backends: EmbeddedBackends, alertname: str, state: str, **labels: str) -> Samples:
    """Raw samples of ``ALERTS{alertname, alertstate, labels…}`` over the replayed range, read with the query API."""
    span = int((REPLAY_TO - DATA_START).total_seconds() // 3600) + 2
    matchers = ",".join(
        f'{name}="{value}"' for name, value in {"alertname": alertname, "alertstate": state, **labels}.items()
    )
    selector = f"ALERTS{{{matchers}}}[{span}h]"
    response = httpx.post(
        f"{backends.metrics.url}/api/v1/query",
        data={"query": selector, "time": str(int(REPLAY_TO.timestamp()) + 60), "nocache": "1"},
        timeout=30.0,
    )
    response.raise_for_status()
    result = response.json()["data"]["result"]
    times = sorted(datetime.fromtimestamp(float(point[0]), tz=UTC) for series in result for point in series["values"])
    return Samples(times)


def wait_for_alert(backends: EmbeddedBackends, alertname: str, state: str, timeout_seconds: float = 60.0) -> Samples:
    """Poll (bounded) until vmalert's written ALERTS samples of that alert are visible in VictoriaMetrics."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        httpx.get(f"{backends.metrics.url}/internal/force_flush", timeout=30.0)
        samples = alert_samples(backends, alertname, state)
        if samples.times or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)


def test_rules_pass_vmalert_dry_run() -> None:
    """A real vmalert parses every rule of deploy/alerts.yaml: MetricsQL expressions and annotation templates."""
    result = subprocess.run(
        [vmalert_binary(), "-dryRun", f"-rule={RULES}", "-loggerLevel=WARN"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_dry_run_rejects_a_broken_rule(tmp_path: Path) -> None:
    """The dry run is a real check: the same rules with one expression broken make vmalert fail, naming the rule."""
    rules = yaml.safe_load(RULES.read_text())
    rule = rules["groups"][0]["rules"][0]
    rule["expr"] += ")"
    broken = tmp_path / "alerts.yaml"
    broken.write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        [vmalert_binary(), "-dryRun", f"-rule={broken}", "-loggerLevel=WARN"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert rule["alert"] in result.stderr


def _replay(series: list[bytes], ready: tuple[str, ...], log_path: Path) -> Iterator[EmbeddedBackends]:
    """A VictoriaMetrics holding ``series`` and the ALERTS series vmalert's replay wrote for them."""
    binary = vmalert_binary()
    with EmbeddedBackends() as backends:
        backends.import_series(series)
        # vmalert must see the whole story, not the part flushed so far.
        for selector in ready:
            wait_for_samples(backends, selector, len(scrape_times()))
        command = [
            binary,
            f"-rule={RULES}",
            f"-datasource.url={backends.metrics.url}",
            f"-remoteWrite.url={backends.metrics.url}",
            f"-replay.timeFrom={REPLAY_FROM.isoformat().replace('+00:00', 'Z')}",
            f"-replay.timeTo={REPLAY_TO.isoformat().replace('+00:00', 'Z')}",
            # The step of the range queries must be the group's interval: vmalert 1.79 defaults it to 5m, and its
            # replay treats a gap between two points longer than the interval as a reset, so a `for:` never completes.
            "-datasource.queryStep=1m",
            # One range query per rule covers the whole replay (about 5,800 evaluations at 1 min).
            "-replay.maxDatapointsPerQuery=10000",
            # No rule reads another's result: no need to wait between rules for remote write.
            "-replay.rulesDelay=0s",
            "-replay.disableProgressBar",
            f"-httpListenAddr=127.0.0.1:{free_port()}",
            "-loggerLevel=INFO",
        ]
        with log_path.open("w") as log_file:
            process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                # Replay mode exits by itself once the range is evaluated and the results are flushed.
                returncode = process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
                pytest.fail(f"vmalert replay did not finish in 120 s: {log_path.read_text()[-2000:]}")
        assert returncode == 0, log_path.read_text()[-2000:]
        yield backends


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBackends]:
    """The story: daily deliveries, then silence, then the bot gone; replayed through vmalert."""
    ready = (METRIC, FIRST_USED, 'digest_deliveries_total{outcome="sent"}', 'digest_deliveries_total{outcome="failed"}')
    yield from _replay(bot_metrics(), ready, tmp_path_factory.mktemp("vmalert") / "vmalert.log")


@pytest.fixture(scope="module")
def fresh_install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBackends]:
    """A bot installed at DATA_START that never delivers; replayed through vmalert."""
    ready = (FIRST_USED, "digest_deliveries_total")
    yield from _replay(fresh_install_metrics(), ready, tmp_path_factory.mktemp("vmalert") / "vmalert.log")


def test_not_delivered_fires_only_after_26_hours_of_silence(replayed: EmbeddedBackends) -> None:
    """DigestNotDelivered stays silent through daily posts (one 1.5 h late) and fires once 26 h pass without one."""
    firing = wait_for_alert(replayed, "DigestNotDelivered", "firing")
    pending = alert_samples(replayed, "DigestNotDelivered", "pending")
    threshold = LAST_DELIVERY + SILENCE
    # Nothing at all — not even pending — through the daily deliveries, the 25.5 h gap before the late one, and the
    # first 26 h of silence.
    assert pending.times, "DigestNotDelivered was never pending"
    assert pending.first > threshold
    assert pending.first <= threshold + EVALUATION
    # Firing after its `for:`, not before.
    assert firing.times, "DigestNotDelivered never fired"
    assert firing.first >= pending.first + FOR
    assert firing.first <= threshold + FOR + 2 * EVALUATION
    # And it keeps firing while the bot is up and silent, up to the moment the bot itself disappears.
    assert firing.times[-1] >= BOT_GONE - 2 * EVALUATION


def test_metrics_absent_fires_26_hours_after_the_bot_disappears(replayed: EmbeddedBackends) -> None:
    """DigestMetricsAbsent stays silent while the gauge is scraped and fires 26 h after its last sample."""
    firing = wait_for_alert(replayed, "DigestMetricsAbsent", "firing")
    pending = alert_samples(replayed, "DigestMetricsAbsent", "pending")
    last_sample = BOT_GONE - SCRAPE
    assert pending.times, "DigestMetricsAbsent was never pending"
    # absent_over_time's window (t - 26h, t] leaves the last sample out exactly 26 h after it.
    assert pending.first >= last_sample + SILENCE
    assert pending.first <= last_sample + SILENCE + 2 * EVALUATION
    assert firing.times, "DigestMetricsAbsent never fired"
    assert firing.first >= pending.first + FOR
    assert firing.first <= REPLAY_TO


def test_delivery_failures_fire_for_an_hour_after_a_failed_post(replayed: EmbeddedBackends) -> None:
    """DigestDeliveryFailures fires on the hour after a failed delivery, and never for successful ones."""
    firing = wait_for_alert(replayed, "DigestDeliveryFailures", "firing")
    assert firing.times, "DigestDeliveryFailures never fired"
    assert FAILURE <= firing.first <= FAILURE + EVALUATION
    assert firing.times[-1] <= FAILURE + FAILURE_WINDOW + EVALUATION
    # Only the failed outcome: the two deliveries that increased `sent` raised nothing.
    assert alert_samples(replayed, "DigestDeliveryFailures", "firing", outcome="sent").times == []
    assert len(alert_samples(replayed, "DigestDeliveryFailures", "firing", outcome="failed").times) == len(firing.times)


def test_a_fresh_install_is_not_absent_and_pages_26_hours_after_it_if_it_never_delivers(
    fresh_install: EmbeddedBackends,
) -> None:
    """A bot up since its install and never delivering: DigestMetricsAbsent never; DigestNotDelivered at 26 h."""
    firing = wait_for_alert(fresh_install, "DigestNotDelivered", "firing")
    pending = alert_samples(fresh_install, "DigestNotDelivered", "pending")
    threshold = DATA_START + SILENCE
    assert pending.times, "DigestNotDelivered was never pending"
    assert threshold < pending.first <= threshold + EVALUATION
    assert firing.times, "DigestNotDelivered never fired"
    assert firing.first >= pending.first + FOR
    # The metrics were there from the install: nothing absent, not even pending, while the bot was scraped.
    absent = alert_samples(fresh_install, "DigestMetricsAbsent", "pending").times
    absent += alert_samples(fresh_install, "DigestMetricsAbsent", "firing").times
    assert not [moment for moment in absent if moment < BOT_GONE - SCRAPE + SILENCE]
