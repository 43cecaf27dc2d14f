"""The scoring policy: every threshold, penalty, cap and log field name, with the seed's rule as the default.

Defaults reproduce the rule of the 2026-07-20 post-mortem: an OOM kill or 50,000 error lines from one workload cost
one point, 500,000 error lines cost two, and OOM plus error lines together cost at most two; Envoy UH costs two,
other flagged 5xx one from 0.01 % and two from 1 %; conntrack 80 % costs one, 95 % or drops two. 10 is OK, 9 is
WARNING, 8 and below CRITICAL.

``DIGEST_POLICY_FILE`` (YAML or TOML) overrides any of it::

    checks:
      error_lines: {warn_lines: 20000}
      envoy_flags: {enabled: false}        # a cluster without Envoy: listed as disabled, never as OK
    caps:
      - {checks: [oom_kills, error_lines], max_penalty: 2}
    grade: {max_score: 10, ok_at: 10, warning_at: 9}
    coverage:                            # checks.coverage: how much of the window and the fleet must be seen
      window_fraction: 0.95              # below this share of the window a check is partial: never a clean OK
      node_tolerance: 0                  # known nodes that may go unseen before a check is partial
      node_gap_minutes: 30               # a node's exporter silent this long is a blind spot
      shipper_silence_minutes: 30        # a node's logs silent this long is a stuck shipper
      absent_nodes: [pi5-4]              # nodes expected to be silent (named "expected absent", not blind)
    logs:
      fields: {level: severity}          # where the log backend keeps a role (defaults per backend: LogsPolicy)

Every value is checked when the file is loaded, not when a check happens to use it: a number must be finite (a
``.nan`` threshold compares false with everything and silently turns its check off), a ratio lies in [0, 1], a
count, a duration or a penalty is 0 or more, a factor is at least 1, and each ``warn_X`` is at most its
``crit_X``. A file that breaks any of this stops the program with one line naming the key.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from digest.checks import registry
from digest.checks.alerts import AlertsPolicy
from digest.checks.conntrack import ConntrackPolicy
from digest.checks.coverage import CoveragePolicy
from digest.checks.cpu_throttling import CpuThrottlingPolicy
from digest.checks.deployments import DeploymentsPolicy
from digest.checks.empty_endpoints import EmptyEndpointsPolicy
from digest.checks.envoy_flags import EnvoyFlagsPolicy
from digest.checks.error_lines import ErrorLinesPolicy
from digest.checks.log_questions import ROLES, Role
from digest.checks.log_storms import LogStormsPolicy
from digest.checks.memory_pressure import MemoryPressurePolicy
from digest.checks.oom_kills import OomKillsPolicy
from digest.checks.readiness import ReadinessPolicy
from digest.checks.restarts import RestartsPolicy
from digest.checks.workloads import WorkloadsPolicy
from digest.pipeline.acks import AckError, parse_target

# Each check's policy section, from the registry (the typed fields of `Policy` below are kept in step by a test).
CHECK_POLICIES: dict[str, type[Any]] = {entry.name: entry.policy_type for entry in registry.CHECKS}


class PolicyError(ValueError):
    """The policy file is unreadable or names an unknown key or a bad value; the message says which."""


@dataclass(frozen=True)
class Cap:
    """Several checks that together cost at most ``max_penalty`` (they measure one incident twice)."""

    checks: tuple[str, ...]
    max_penalty: int


@dataclass(frozen=True)
class PolicyAck:
    """A known, permanent exception (`digest.pipeline.acks`): a check, or one subject of it, acked for a reason.

    ``until`` (a day, through its end in UTC) ends it; ``at_most`` bounds the value it covers (more lifts it).
    """

    check: str
    subject: str
    reason: str
    until: date | None = None
    at_most: float | None = None


@dataclass(frozen=True)
class Grade:
    """How a score becomes a status."""

    max_score: int = 10
    ok_at: int = 10
    warning_at: int = 9


@dataclass(frozen=True)
class TrendsPolicy:
    """How far back trends look and what counts as a change worth a line (see digest.pipeline.trends)."""

    enabled: bool = True
    days: int = 7
    min_factor: float = 3.0


@dataclass(frozen=True)
class LogsPolicy:
    """Where the log backend keeps each role (namespace, pod, container, node, level, stream) of a line.

    Empty: the backend's defaults — Vector's ``kubernetes_logs`` fields on VictoriaLogs (``kubernetes.pod_namespace``,
    ``kubernetes.pod_name``, ``kubernetes.container_name``, ``kubernetes.pod_node_name``, ``level``, ``stream``),
    Promtail/Alloy's labels on Loki (``namespace``, ``pod``, ``container``, ``node_name``, ``stream``, and ``level``
    as a label or structured metadata).
    """

    fields: dict[str, str] = field(default_factory=dict)

    def role_fields(self) -> dict[Role, str]:
        """The overrides, keyed by role (the loader refused any other key)."""
        return {role: self.fields[role] for role in ROLES if role in self.fields}


@dataclass(frozen=True)
class Policy:
    """Every knob of the digest's judgement."""

    oom_kills: OomKillsPolicy = field(default_factory=OomKillsPolicy)
    error_lines: ErrorLinesPolicy = field(default_factory=ErrorLinesPolicy)
    conntrack: ConntrackPolicy = field(default_factory=ConntrackPolicy)
    envoy_flags: EnvoyFlagsPolicy = field(default_factory=EnvoyFlagsPolicy)
    # Diagnostic checks: they explain and cost nothing by default (see graded()).
    memory_pressure: MemoryPressurePolicy = field(default_factory=MemoryPressurePolicy)
    cpu_throttling: CpuThrottlingPolicy = field(default_factory=CpuThrottlingPolicy)
    restarts: RestartsPolicy = field(default_factory=RestartsPolicy)
    readiness: ReadinessPolicy = field(default_factory=ReadinessPolicy)
    empty_endpoints: EmptyEndpointsPolicy = field(default_factory=EmptyEndpointsPolicy)
    deployments: DeploymentsPolicy = field(default_factory=DeploymentsPolicy)
    workloads: WorkloadsPolicy = field(default_factory=WorkloadsPolicy)
    log_storms: LogStormsPolicy = field(default_factory=LogStormsPolicy)
    alerts: AlertsPolicy = field(default_factory=AlertsPolicy)
    caps: tuple[Cap, ...] = (Cap(checks=("oom_kills", "error_lines"), max_penalty=2),)
    grade: Grade = field(default_factory=Grade)
    trends: TrendsPolicy = field(default_factory=TrendsPolicy)
    coverage: CoveragePolicy = field(default_factory=CoveragePolicy)
    logs: LogsPolicy = field(default_factory=LogsPolicy)
    acks: tuple[PolicyAck, ...] = ()

    def enabled(self, name: str) -> bool:
        """Whether the check called ``name`` runs."""
        return bool(getattr(self, name).enabled)

    def graded(self, name: str) -> bool:
        """Whether the check can cost points: only those gate the grade (UNKNOWN keeps a graded digest from OK).

        The seed rule's four checks cost points by default; the diagnostic checks explain and cost nothing unless
        the policy gives them a penalty — and then they gate the grade like the others.
        """
        policy = getattr(self, name, None)
        if policy is None or not dataclasses.is_dataclass(policy):
            return True  # a check the policy does not know is judged as strictly as the graded ones
        return any(
            field.name.endswith("penalty") and getattr(policy, field.name) > 0 for field in dataclasses.fields(policy)
        )


def load_policy(path: Path | None) -> Policy:
    """The default policy, overridden by the YAML or TOML file at ``path`` if given."""
    if path is None:
        return Policy()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"cannot read {path} ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise PolicyError(f"cannot read {path} (not UTF-8 text)") from None
    # Imported here: most runs have no policy file, and every run pays its start-up time.
    import tomllib

    import yaml

    language = "TOML" if path.suffix == ".toml" else "YAML"
    try:
        raw = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PolicyError(f"{path.name} is not valid {language}: {first_line}") from None
    except RecursionError:
        raise PolicyError(f"{path.name} is not valid {language}: nested too deeply") from None
    if raw is None:  # an empty file (or only comments): the defaults
        return Policy()
    if not isinstance(raw, Mapping):
        kind = {list: "a list", str: "text", int: "a number", float: "a number", bool: "a boolean"}.get(type(raw))
        raise PolicyError(
            f"{path.name} must be a mapping with keys {', '.join(sorted(_TOP_LEVEL))}, not {kind or type(raw).__name__}"
        )
    return policy_from_mapping(raw)


def policy_from_mapping(raw: object) -> Policy:
    """Build a policy from parsed YAML/TOML, rejecting unknown keys and wrong types by their dotted path."""
    if not isinstance(raw, Mapping):
        raise PolicyError(f"the policy must be a mapping with keys {', '.join(sorted(_TOP_LEVEL))}")
    _reject_unknown(raw, _TOP_LEVEL, "")
    checks_raw = raw.get("checks") or {}
    if not isinstance(checks_raw, Mapping):
        raise PolicyError("checks: must be a mapping of check name to settings")
    for old, new in _RENAMED.items():
        if old in checks_raw:
            raise PolicyError(f"checks.{old}: renamed to checks.{new} ({_RENAMED_WHY[old]})")
    _refuse_moved(raw, checks_raw)
    _reject_unknown(checks_raw, set(CHECK_POLICIES), "checks.")
    values: dict[str, Any] = {}
    for name, policy_type in CHECK_POLICIES.items():
        values[name] = _dataclass_from(policy_type, checks_raw.get(name) or {}, f"checks.{name}")
    if "caps" in raw:
        caps_raw = raw["caps"] or []
        if not isinstance(caps_raw, list):
            raise PolicyError("caps: must be a list")
        caps = tuple(_dataclass_from(Cap, item, f"caps[{index}]") for index, item in enumerate(caps_raw))
        for index, cap in enumerate(caps):
            unknown_names = [name for name in cap.checks if name not in CHECK_POLICIES]
            if unknown_names:
                raise PolicyError(f"caps[{index}].checks: unknown check {unknown_names[0]!r}")
        values["caps"] = caps
    if "grade" in raw:
        grade = _dataclass_from(Grade, raw["grade"] or {}, "grade")
        if not grade.max_score >= grade.ok_at >= grade.warning_at:
            raise PolicyError("grade: needs max_score >= ok_at >= warning_at")
        values["grade"] = grade
    if "trends" in raw:
        trends = _dataclass_from(TrendsPolicy, raw["trends"] or {}, "trends")
        if not 0 <= trends.days <= 31 or trends.min_factor <= 1:
            raise PolicyError("trends: needs 0 <= days <= 31 and min_factor > 1")
        values["trends"] = trends
    if "coverage" in raw:
        coverage = _dataclass_from(CoveragePolicy, raw["coverage"] or {}, "coverage")
        problem = coverage.validate()
        if problem:
            raise PolicyError(f"coverage.{problem}")
        values["coverage"] = coverage
    if "logs" in raw:
        logs = _dataclass_from(LogsPolicy, raw["logs"] or {}, "logs")
        for role, name in logs.fields.items():
            if not name.strip():
                raise PolicyError(f"logs.fields.{role}: must name a field or label")
        values["logs"] = logs
    if "acks" in raw:
        values["acks"] = _acks(raw["acks"])
    return Policy(**values)


_TOP_LEVEL = {"checks", "caps", "grade", "trends", "coverage", "logs", "acks"}
_ACK_KEYS = {"finding", "reason", "until", "at_most"}


def _acks(raw: object) -> tuple[PolicyAck, ...]:
    """``acks:`` — each ``{finding: check[:subject], reason: text, until: YYYY-MM-DD, at_most: number}``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PolicyError("acks: must be a list")
    acks: list[PolicyAck] = []
    for index, item in enumerate(raw):
        where = f"acks[{index}]"
        if not isinstance(item, Mapping):
            raise PolicyError(f"{where}: must be a mapping with finding and reason")
        _reject_unknown(item, _ACK_KEYS, f"{where}.")
        finding, reason = item.get("finding"), item.get("reason")
        if not isinstance(finding, str):
            raise PolicyError(f"{where}.finding: must name a check, or check:subject")
        try:
            check, subject = parse_target(finding, CHECK_POLICIES)
        except AckError as exc:
            raise PolicyError(f"{where}.finding: {exc}") from None
        if not isinstance(reason, str) or not reason.strip():
            raise PolicyError(f"{where}.reason: must say why (an ack without a reason is a silence)")
        until = item.get("until")
        if isinstance(until, str):
            try:
                until = date.fromisoformat(until)
            except ValueError:
                raise PolicyError(f"{where}.until: must be a day, YYYY-MM-DD") from None
        if until is not None and (not isinstance(until, date) or hasattr(until, "hour")):
            raise PolicyError(f"{where}.until: must be a day, YYYY-MM-DD")
        at_most = item.get("at_most")
        if at_most is not None and (
            isinstance(at_most, bool) or not isinstance(at_most, int | float) or not math.isfinite(at_most)
        ):
            raise PolicyError(f"{where}.at_most: must be a number")
        acks.append(PolicyAck(check, subject, reason.strip(), until, float(at_most) if at_most is not None else None))
    return tuple(acks)


# Keys that moved: a policy file written before still names them, and must be told where they went.
_MOVED = {
    "error_lines.namespace_field": "logs.fields.namespace",
    "error_lines.pod_field": "logs.fields.pod",
    "error_lines.level_field": "logs.fields.level",
    "log_storms.namespace_field": "logs.fields.namespace",
    "log_storms.pod_field": "logs.fields.pod",
    "coverage.log_node_field": "logs.fields.node",
}

# Checks renamed since a policy file may have been written, so that an old file gets told what to write instead.
_RENAMED = {"rollouts": "deployments"}
_RENAMED_WHY = {
    "rollouts": "it reports unavailable replicas and, apart, the rollouts proven by a new ReplicaSet; readiness is "
    "the readiness check's",
}


def _refuse_moved(raw: Mapping[str, Any], checks_raw: Mapping[str, Any]) -> None:
    for old, new in _MOVED.items():
        section, key = old.split(".")
        holder = raw.get(section) if section == "coverage" else checks_raw.get(section)
        if isinstance(holder, Mapping) and key in holder:
            where = old if section == "coverage" else f"checks.{old}"
            raise PolicyError(f"{where}: moved to {new} (one place for every log check and each log backend)")


def _reject_unknown(raw: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for key in raw:
        if key not in allowed:
            raise PolicyError(f"{where}{key}: unknown key (known: {', '.join(sorted(allowed))})")


def _dataclass_from(kind: type[Any], raw: object, where: str) -> Any:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: must be a mapping")
    _reject_unknown(raw, {item.name for item in dataclasses.fields(kind)}, f"{where}.")
    defaults = dataclasses.asdict(kind()) if kind is not Cap else {}
    _refuse_coerced_numbers(kind, raw, where)
    try:
        value = TypeAdapter(kind).validate_python({**defaults, **raw}, strict=False)
    except ValidationError as exc:
        first = exc.errors(include_input=False, include_url=False)[0]
        path = ".".join(str(part) for part in first.get("loc", ()))
        raise PolicyError(f"{where}.{path}: {first.get('msg', 'invalid value')}") from None
    problem = _senseless(value)
    if problem:
        raise PolicyError(f"{where}.{problem}")
    for item in dataclasses.fields(kind):
        if item.name in _ROLE_MAPS:
            for role in getattr(value, item.name):
                if role not in ROLES:
                    raise PolicyError(f"{where}.{item.name}.{role}: unknown role (known: {', '.join(ROLES)})")
    return value


# Sections' keys that map log roles to values (envoy_flags.scope, log_storms.exclude, logs.fields).
_ROLE_MAPS = frozenset({"scope", "exclude", "fields"})


def _refuse_coerced_numbers(kind: type[Any], raw: Mapping[str, Any], where: str) -> None:
    """Refuse a boolean or a text where a number is meant, which pydantic's lax mode would turn into one.

    ``warn_lines: true`` would silently become a threshold of 1, ``"50000"`` is a quoting mistake that may hide
    another; only the numeric fields are checked so that lists still validate as tuples (strict mode refuses those).
    """
    hints = typing.get_type_hints(kind)
    for key, value in raw.items():
        if hints.get(key) in (int, float) and isinstance(value, bool | str):
            what = "a boolean" if isinstance(value, bool) else "text"
            raise PolicyError(f"{where}.{key}: must be a number, not {what}")


# What each numeric key may hold, by its name: the check modules name them by what they measure.
# A share of requests, of a limit, of CFS periods: a fraction.
_RATIO_SUFFIX = "_ratio"
# Multipliers of a threshold ("10x the budget", "3x the usual"): below 1 would flag the ordinary as exceptional.
_FACTORS = frozenset({"crit_factor", "min_factor"})
# Used as a PromQL range or a budget, where 0 makes the query invalid or flags every pod: at least 1.
_AT_LEAST_ONE = frozenset({"presence_days", "sustain_minutes", "budget_per_minute"})


def _senseless(value: object) -> str | None:
    """The first key of the dataclass ``value`` whose number makes no sense, as ``key: why``; None when all do.

    Everything numeric not named above (thresholds in lines, minutes or seconds, penalties, ``top``, intervals
    where 0 means "measure it") must be 0 or more; and each ``warn_X`` at most its ``crit_X``.
    """
    numbers = {
        item.name: number
        for item in dataclasses.fields(value)  # type: ignore[arg-type]  # every policy section is a dataclass
        if isinstance(number := getattr(value, item.name), int | float) and not isinstance(number, bool)
    }
    for name, number in numbers.items():
        if name.endswith(_RATIO_SUFFIX):
            low, high, rule = 0.0, 1.0, "must be a finite number between 0 and 1"
        elif name in _FACTORS or name in _AT_LEAST_ONE:
            low, high, rule = 1.0, math.inf, "must be a finite number of at least 1"
        else:
            low, high, rule = 0.0, math.inf, "must be a finite number, 0 or more"
        try:
            finite = math.isfinite(number)
        except OverflowError:  # an integer of hundreds of digits: comparing it with a float would raise too
            return f"{name}: too large a number ({rule})"
        if not (finite and low <= number <= high):
            return f"{name}: {rule}"
    for name, number in numbers.items():
        partner = "crit_" + name.removeprefix("warn_")
        if name.startswith("warn_") and partner in numbers and number > numbers[partner]:
            return f"{name}: must be at most {partner} ({number:g} > {numbers[partner]:g})"
    return None
