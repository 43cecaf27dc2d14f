"""`digest doctor`, per check, lists what it reads: found with where, or not found with the key to change.

The declarations (each check module's ``INPUTS``, through `checks.registry`) are kept honest here against the
checks' own code and questions; the doctor's report is tested on the real backends: the corpus day 2026-07-20 (every
graded check's required input found, with its jobs), a policy that names fields the logs do not have — both on
VictoriaLogs and on Loki, whose field counts must find what VictoriaLogs' find — and a store of its own holding one
calm day without the kernel's OOM counter and with kube-state-metrics under another job.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from digest.checks import registry
from digest.checks.contract import Window
from digest.checks.log_questions import (
    ROLES,
    AllOf,
    AnyOf,
    Empty,
    Filter,
    Is,
    Json,
    LineCount,
    Matches,
    Not,
    OneOf,
    PeakCount,
)
from digest.pipeline.policy import Policy
from digest.testbed.corpus.model import Series
from digest.testbed.embedded import EmbeddedBackends
from digest.testbed.loki_server import LokiServer
from tests.command import backend_env, run_digest
from tests.test_coverage_ablations import Ablation, Copy, _keep_line, _lines, _series

AT = "2026-07-21T00:00:00Z"  # the 24 h of the corpus day 2026-07-20
CALM = date(2026, 7, 19)
WINDOW = Window(datetime(2026, 7, 20, tzinfo=UTC), datetime(2026, 7, 21, tzinfo=UTC), UTC, "2026-07-20")

# The declarations --------------------------------------------------------------------------------------------------

_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {"bool", "and", "or", "unless", "offset"}


def _families(promql: str) -> set[str]:
    """The metric names a PromQL expression selects (strings, matchers, ranges and groupings taken out first)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', promql)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = _GROUPING.sub("", text)
    return {name for name in _NAME.findall(text) if name not in _KEYWORDS}


def _code_strings(module: Any) -> str:
    """Every string the module's code holds, its docstrings and its INPUTS declaration left out."""
    tree = ast.parse(inspect.getsource(module))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(target, ast.Name) and target.id == "INPUTS" for target in targets):
                skipped.update(id(inner) for inner in ast.walk(node))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skipped.add(id(first.value))
    return "\n".join(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
    )


def _helpers(module: Any) -> list[Any]:
    """The checks/ modules ``module`` imports to build its queries (not coverage's needs, not the vocabulary)."""
    # checks/ imports its own modules relatively (it is installed as digest.checks and imports nothing of digest).
    names = {
        f"digest.checks.{node.module}"
        for node in ast.walk(ast.parse(inspect.getsource(module)))
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 1
    }
    return [
        importlib.import_module(name)
        for name in sorted(names - {"digest.checks.coverage", "digest.checks.contract", "digest.checks.log_questions"})
    ]


def _fields(one: Filter) -> set[str]:
    """The log fields a filter reads: roles, and JSON keys as ``json:key``."""
    match one:
        case Is(field=target) | OneOf(field=target) | Matches(field=target) | Empty(field=target):
            return {f"json:{target.key}" if isinstance(target, Json) else target}
        case AllOf(parts=parts) | AnyOf(parts=parts):
            return {name for part in parts for name in _fields(part)}
        case Not(part=part):
            return _fields(part)
    return set()


@pytest.mark.parametrize("entry", registry.CHECKS, ids=lambda entry: entry.name)
def test_every_declared_input_is_read_by_its_check(entry: registry.Entry) -> None:
    """Each check declares inputs, each declared family is in its code, each policy key exists in the policy."""
    assert entry.inputs, f"{entry.name} declares no inputs"
    module = inspect.getmodule(entry.build)
    assert module is not None
    code = "\n".join(_code_strings(one) for one in (module, *_helpers(module)))
    policy = Policy()
    for one in entry.inputs:
        if one.kind == "series":
            assert re.search(rf"(?<![\w:]){re.escape(one.name)}(?![\w:])", code), f"{entry.name}: {one.name}"
        if one.kind == "log_field":
            assert one.name in ROLES
            assert one.policy_key == f"logs.fields.{one.name}"
        if one.kind == "json_key":
            assert one.policy_key is not None
            section, key = one.policy_key.split(".")
            assert getattr(getattr(policy, section), key) == one.name  # the default key is the policy's default
        if one.by_job or one.kind in ("lines", "json_key"):
            assert one.policy_key, f"{entry.name}: {one.name} says no policy key"
        if one.policy_key and not one.policy_key.startswith("logs.fields."):
            section, key = one.policy_key.split(".")
            assert hasattr(getattr(policy, section), key), one.policy_key
    if entry.lines is None:
        assert all(one.kind == "series" for one in entry.inputs)


@pytest.mark.parametrize("entry", registry.CHECKS, ids=lambda entry: entry.name)
def test_every_family_and_field_a_check_asks_is_declared(entry: registry.Entry) -> None:
    """The families of a check's fixed PromQL and the fields its log questions group or count by are all declared."""
    check = entry.build(getattr(Policy(), entry.name))
    declared = {one.name for one in entry.inputs if one.kind == "series"}
    fields = {f"json:{one.name}" if one.kind == "json_key" else one.name for one in entry.inputs}
    for purpose, question in entry.asks(check, WINDOW).items():
        if isinstance(question, str):
            assert _families(question) <= declared, f"{entry.name}.{purpose}: {_families(question) - declared}"
            continue
        read = {f"json:{target.key}" if isinstance(target, Json) else target for target in question.by}
        if isinstance(question, LineCount):
            read |= {name for _, column in question.columns for name in _fields(column)}
        assert isinstance(question, LineCount | PeakCount)
        assert read <= fields, f"{entry.name}.{purpose}: {read - fields}"


# The doctor on the backends ---------------------------------------------------------------------------------------


# The Loki doctor tests are about the log inputs: without the trends' seven earlier days the digest inside the doctor
# scans one day of Loki instead of eight (these were the suite's longest tests), and the inputs are the same.
NO_TRENDS = "[trends]\ndays = 0\n\n"


def _doctor(
    backends: EmbeddedBackends, at: str, loki: LokiServer | None = None, **variables: str
) -> tuple[int, str, dict[str, Any]]:
    env = backend_env(backends, **variables)
    if loki is not None:  # the logs from Loki instead of VictoriaLogs
        del env["DIGEST_VL_URL"]
        env["DIGEST_LOKI_URL"] = loki.url
    text = run_digest("doctor", "--at", at, env=env, timeout=300)
    payload = run_digest("doctor", "--at", at, "--format", "json", env=env, timeout=300)
    assert text.returncode == payload.returncode, text.stderr + payload.stderr
    return text.returncode, text.stdout, json.loads(payload.stdout)


def _inputs(payload: dict[str, Any], check: str) -> dict[str, dict[str, Any]]:
    found = next(item for item in payload["checks"] if item["name"] == check)
    # ``up`` is read for several jobs: named with the job's regex (``up.*kube-state-metrics.*``).
    return {one["name"] + (one.get("job", "") if one["name"] == "up" else ""): one for one in found["inputs"]}


def test_on_07_20_every_graded_check_finds_its_required_inputs(corpus_backends: EmbeddedBackends) -> None:
    """2026-07-20: each graded check's required inputs are found, the families with the jobs that carry them."""
    code, text, payload = _doctor(corpus_backends, AT)
    assert code == 0, text
    for check in ("oom_kills", "error_lines", "conntrack", "envoy_flags"):
        required = [one for one in _inputs(payload, check).values() if one["required"]]
        assert required, check
        assert all(one["found"] for one in required), (check, required)
    oom = _inputs(payload, "oom_kills")
    assert oom["kube_pod_container_status_last_terminated_reason"]["jobs"] == ["kube-state-metrics"]
    assert oom["node_vmstat_oom_kill"]["jobs"] == ["node-exporter"]
    assert oom["up.*kube-state-metrics.*"]["series"] >= 1
    assert _inputs(payload, "conntrack")["node_nf_conntrack_entries"]["series"] == 3  # one per node
    envoy = _inputs(payload, "envoy_flags")
    assert envoy["response_flags"]["lines"] == envoy["access log"]["lines"] > 0
    assert envoy["istio_requests_total"]["found"] is False  # Envoy Gateway's access log only, on this cluster
    lines = text.splitlines()
    oom_at = lines.index("  ✓ oom_kills (graded): runs, reads its sources")
    assert lines[oom_at + 1] == '      found up{job=~".*kube-state-metrics.*"}: 1 series (job kube-state-metrics)'
    assert "      found node_vmstat_oom_kill: 3 series (job node-exporter)" in lines
    assert "      found pod (kubernetes.pod_name): in " in text
    assert (
        "      – not found istio_requests_total (Istio's requests) → Istio's telemetry, or "
        "envoy_flags.use_istio_metrics: false" in lines
    )


def test_fields_the_logs_do_not_have_are_named_with_their_policy_key(
    corpus_backends: EmbeddedBackends, tmp_path: Path
) -> None:
    """A policy naming a pod field and a flags key the logs lack: each ✗ not found, with the key that names it."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[logs.fields]\npod = "pod_name"\n\n[checks.envoy_flags]\nflags_field = "flags"\n')
    _, text, payload = _doctor(corpus_backends, AT, DIGEST_POLICY_FILE=str(policy))
    pod = _inputs(payload, "error_lines")["pod"]
    assert (pod["found"], pod["field"], pod["policy_key"]) == (False, "pod_name", "logs.fields.pod")
    flags = _inputs(payload, "envoy_flags")["response_flags"]
    assert (flags["found"], flags["field"], flags["policy_key"]) == (False, "flags", "envoy_flags.flags_field")
    access = _inputs(payload, "envoy_flags")["access log"]["lines"]
    assert f"✗ not found response_flags (flags): in none of {access:,.0f} lines" in text
    assert text.count("(which workload) → logs.fields.pod") == 1
    assert "✗ not found pod (pod_name): in none of " in text


def test_on_loki_the_log_fields_are_counted_as_on_victorialogs(
    corpus_backends: EmbeddedBackends, loki_corpus: LokiServer, tmp_path: Path
) -> None:
    """07-20 on Loki: each log input found or not as on VictoriaLogs, found with lines, flags on each access line."""
    policy = tmp_path / "policy.toml"
    policy.write_text(NO_TRENDS)
    code, text, payload = _doctor(corpus_backends, AT, loki=loki_corpus, DIGEST_POLICY_FILE=str(policy))
    assert code == 0, text
    _, _, on_victorialogs = _doctor(corpus_backends, AT, DIGEST_POLICY_FILE=str(policy))
    for check in ("error_lines", "envoy_flags", "log_storms"):
        loki_inputs, victoria_inputs = _inputs(payload, check), _inputs(on_victorialogs, check)
        assert loki_inputs.keys() == victoria_inputs.keys(), check
        for name, one in loki_inputs.items():
            assert one["found"] == victoria_inputs[name]["found"], (check, name, one)
            if "lines" in one and one["found"]:
                assert one["lines"] > 0, (check, name, one)
    envoy = _inputs(payload, "envoy_flags")
    # The Loki corpus is the VictoriaLogs one at a smaller scale: the same share of lines carries each field.
    assert envoy["response_flags"]["lines"] == envoy["access log"]["lines"] > 0
    assert "      found pod: in " in text  # a stream label on Loki, named as the role


def test_on_loki_fields_the_logs_do_not_have_are_named_with_their_policy_key(
    corpus_backends: EmbeddedBackends, loki_corpus: LokiServer, tmp_path: Path
) -> None:
    """On Loki too, a pod field and a flags key the logs lack are each ✗ not found, with the key that names it."""
    policy = tmp_path / "policy.toml"
    policy.write_text(NO_TRENDS + '[logs.fields]\npod = "pod_name"\n\n[checks.envoy_flags]\nflags_field = "flags"\n')
    _, text, payload = _doctor(corpus_backends, AT, loki=loki_corpus, DIGEST_POLICY_FILE=str(policy))
    pod = _inputs(payload, "error_lines")["pod"]
    assert (pod["found"], pod["field"], pod["policy_key"]) == (False, "pod_name", "logs.fields.pod")
    flags = _inputs(payload, "envoy_flags")["response_flags"]
    assert (flags["found"], flags["field"], flags["policy_key"]) == (False, "flags", "envoy_flags.flags_field")
    access = _inputs(payload, "envoy_flags")["access log"]["lines"]
    assert access > 0
    assert f"✗ not found response_flags (flags): in none of {access:,.0f} lines" in text


def _calm_without_kernel_counter(one: Series, _start: int, _node: str) -> Series | None:
    """The calm day without node_vmstat_oom_kill anywhere, and kube-state-metrics scraped as job "ksm"."""
    if one.labels["__name__"] == "node_vmstat_oom_kill":
        return None
    if one.labels.get("job") == "kube-state-metrics":
        return Series({**one.labels, "job": "ksm"}, one.timestamps_ms, one.values)
    return one


@pytest.fixture
def ablated(own_backends: EmbeddedBackends) -> EmbeddedBackends:
    """Own backends holding the calm day 07-19, ablated as above, at its own date."""
    copy = Copy(CALM, Ablation("no kernel counter, ksm renamed", _calm_without_kernel_counter, _keep_line, tuple), CALM)
    counter = [0]
    own_backends.import_series(_series(copy))
    own_backends.ingest_logs(_lines(copy, counter))
    end = datetime(2026, 7, 20, tzinfo=UTC)
    own_backends.wait_for_series("kube_node_info", end, 3)
    own_backends.wait_for_logs(datetime(2026, 7, 19, tzinfo=UTC), end, counter[0])
    return own_backends


def test_a_missing_family_and_a_renamed_job_are_not_found_with_what_to_change(ablated: EmbeddedBackends) -> None:
    """No kernel OOM counter: "not found" with its collector; kube-state-metrics as job ksm: found there, key named."""
    code, text, payload = _doctor(ablated, "2026-07-20T00:00:00Z")
    assert code == 2  # the graded oom_kills cannot run without kube-state-metrics' up
    oom = _inputs(payload, "oom_kills")
    assert oom["node_vmstat_oom_kill"]["found"] is False
    assert oom["node_vmstat_oom_kill"]["other_jobs"] == []
    up = oom["up.*kube-state-metrics.*"]
    assert (up["found"], up["required"], up["policy_key"]) == (False, True, "oom_kills.ksm_job")
    assert "ksm" in up["other_jobs"]
    assert oom["kube_pod_container_status_restarts_total"]["jobs"] == ["ksm"]
    assert (
        "      – not found node_vmstat_oom_kill (the kernel's cross-check) → node_exporter's vmstat collector"
        in text.splitlines()
    )
    assert re.search(
        r'\n      ✗ not found up\{job=~"\.\*kube-state-metrics\.\*"\}: '
        r"jobs [^\n]*ksm[^\n]* here → oom_kills\.ksm_job\n",
        text,
    ), text
    assert "      found kube_pod_container_status_restarts_total: 13 series (job ksm)" in text
    assert "→ restarts.ksm_job" in text  # each check's own key
