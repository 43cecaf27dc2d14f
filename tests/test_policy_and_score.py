"""Policy files and scoring: the seed's rule by default, overrides by file, UNKNOWN never graded OK."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from digest.checks.contract import Finding, Status, Window
from digest.output.render import headline, to_json
from digest.pipeline.policy import Policy, PolicyError, load_policy
from digest.pipeline.score import DigestStatus, grade

WINDOW = Window(datetime(2026, 7, 20, tzinfo=UTC), datetime(2026, 7, 21, tzinfo=UTC), ZoneInfo("UTC"), "2026-07-20")


def finding(name: str, status: Status, penalty: int = 0) -> Finding:
    return Finding(
        name=name, status=status, penalty=penalty, value=0, summary="s", error="e" if status is Status.UNKNOWN else None
    )


def test_oom_and_error_flood_cost_at_most_two() -> None:
    """07-20: error lines −2 and an OOM −1 are capped at 2, giving CRITICAL 8/10."""
    digest = grade(
        "homelab",
        WINDOW,
        [finding("oom_kills", Status.WARN, 1), finding("error_lines", Status.CRIT, 2), finding("conntrack", Status.OK)],
        [],
        Policy(),
    )
    assert (digest.status, digest.score) == (DigestStatus.CRITICAL, 8)
    assert digest.applied == {"oom_kills": 0, "error_lines": 2, "conntrack": 0}
    assert digest.caps[0].raw_penalty == 3


def test_one_point_is_warning_and_ten_is_ok() -> None:
    """9/10 is WARNING and 10/10 with every check seen is OK."""
    warning = grade("c", WINDOW, [finding("envoy_flags", Status.WARN, 1)], [], Policy())
    assert (warning.status, warning.score) == (DigestStatus.WARNING, 9)
    ok = grade("c", WINDOW, [finding("envoy_flags", Status.OK)], [], Policy())
    assert (ok.status, ok.score) == (DigestStatus.OK, 10)


def test_unknown_is_never_ok() -> None:
    """A blind check turns a perfect score into UNKNOWN, and does not hide a WARNING either."""
    blind = grade("c", WINDOW, [finding("error_lines", Status.UNKNOWN), finding("conntrack", Status.OK)], [], Policy())
    assert blind.status is DigestStatus.UNKNOWN
    worse = grade(
        "c", WINDOW, [finding("error_lines", Status.UNKNOWN), finding("conntrack", Status.WARN, 1)], [], Policy()
    )
    assert worse.status is DigestStatus.WARNING


def test_nothing_graded_is_unknown_with_no_score_in_json() -> None:
    """With every graded check costing nothing, a calm day is UNKNOWN, never OK 10/10, and its JSON has no score."""
    silent = replace(
        Policy(),
        oom_kills=replace(Policy().oom_kills, penalty=0),
        error_lines=replace(Policy().error_lines, warn_penalty=0, crit_penalty=0),
        conntrack=replace(Policy().conntrack, warn_penalty=0, crit_penalty=0),
        envoy_flags=replace(Policy().envoy_flags, uh_penalty=0, warn_penalty=0, crit_penalty=0),
    )
    assert not any(silent.graded(name) for name in ("oom_kills", "error_lines", "conntrack", "envoy_flags"))
    digest = grade("c", WINDOW, [finding("conntrack", Status.OK), finding("memory_pressure", Status.OK)], [], silent)
    assert digest.status is DigestStatus.UNKNOWN
    payload = to_json(digest)
    assert payload["score"] is None
    assert payload["score_note"] == "nothing that grades the day could be checked"
    assert headline(digest) == "UNKNOWN · c · 2026-07-20"


def test_ok_at_below_the_maximum_lets_a_point_lost_read_ok() -> None:
    """grade.ok_at 9: an OOM kill's −1 is OK 9/10; a graded WARN that costs nothing still keeps it from OK."""
    lenient = replace(Policy(), grade=replace(Policy().grade, ok_at=9, warning_at=8))
    one_point = grade("c", WINDOW, [finding("oom_kills", Status.WARN, 1), finding("conntrack", Status.OK)], [], lenient)
    assert (one_point.status, one_point.score) == (DigestStatus.OK, 9)
    free_warning = grade("c", WINDOW, [finding("error_lines", Status.WARN, 0)], [], lenient)
    assert (free_warning.status, free_warning.score) == (DigestStatus.WARNING, 10)


def test_disabled_check_is_listed_not_ok() -> None:
    """A check disabled by policy is carried as disabled, not as a finding."""
    digest = grade("c", WINDOW, [finding("conntrack", Status.OK)], ["envoy_flags"], Policy())
    assert digest.disabled == ("envoy_flags",)
    assert all(item.name != "envoy_flags" for item in digest.findings)


def test_score_floor_is_zero() -> None:
    """Penalties beyond 10 points stop at 0."""
    findings = [finding(f"c{index}", Status.CRIT, 4) for index in range(4)]
    assert grade("c", WINDOW, findings, [], Policy()).score == 0


def test_yaml_policy_overrides_thresholds(tmp_path: Path) -> None:
    """A YAML file overrides a threshold, a field name and disables a check."""
    path = tmp_path / "policy.yaml"
    path.write_text(
        "checks:\n  error_lines: {warn_lines: 100}\n  envoy_flags: {enabled: false}\n"
        "logs:\n  fields: {level: severity}\n"
    )
    policy = load_policy(path)
    assert policy.error_lines.warn_lines == 100
    assert policy.logs.role_fields() == {"level": "severity"}
    assert policy.error_lines.crit_lines == 500_000
    assert not policy.enabled("envoy_flags")


def test_toml_policy_and_caps(tmp_path: Path) -> None:
    """A TOML file can change the caps and the grade bands."""
    path = tmp_path / "policy.toml"
    path.write_text('[[caps]]\nchecks = ["oom_kills", "error_lines"]\nmax_penalty = 3\n[grade]\nwarning_at = 8\n')
    policy = load_policy(path)
    assert policy.caps[0].max_penalty == 3
    assert policy.grade.warning_at == 8


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("checks:\n  error_lines: {warn_lines: lots}\n", "checks.error_lines.warn_lines"),
        ("checks:\n  error_line: {}\n", "checks.error_line: unknown key"),
        ("checks:\n  conntrack: {warn_ratoi: 0.5}\n", "checks.conntrack.warn_ratoi: unknown key"),
        ("caps:\n  - {checks: [nope], max_penalty: 1}\n", "caps[0].checks: unknown check"),
        ("checks: [1, 2\n", "not valid YAML"),
        ("checks:\n  rollouts: {crit_minutes: 15}\n", "checks.rollouts: renamed to checks.deployments"),
    ],
)
def test_bad_policy_names_the_key(tmp_path: Path, text: str, where: str) -> None:
    """A bad policy file fails with the dotted path of the bad key."""
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError, match=__import__("re").escape(where)):
        load_policy(path)


def test_example_policy_documents_the_defaults() -> None:
    """deploy/policy.example.yaml spells out exactly the default policy (the docs cannot drift)."""
    example = Path(__file__).parent.parent / "deploy" / "policy.example.yaml"
    assert load_policy(example) == Policy()
