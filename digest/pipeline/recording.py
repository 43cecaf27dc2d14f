"""Which log counts are worth recording, decided by the policy's checks: one source of truth for rules and checks.

The families (`digest.backends.recorded.Family`) are made from the questions the enabled checks ask, so that a rule
counts exactly what a check would have counted by scanning:

* ``pod_lines``: every pod line in ``error_lines``' scope, per namespace, pod and node (a pod runs on one node, so
  the node costs no extra series and coverage reads its per-node lines from the same records), in the columns
  ``total``, ``errors`` (the check's error rule) and ``chatter`` (what ``log_storms`` counts: the access logs left
  out). ``error_lines`` sums it, ``log_storms`` takes each pod's busiest minute and sum, coverage its per-node
  lines.
* ``storm_lines``: only when ``log_storms`` has a scope of its own (a different ``scope_filter``).
* ``access_lines``: the gateway's access log per upstream and response flags, ``requests`` and ``errors`` (5xx), what
  ``envoy_flags`` sums per hour.

A disabled check records nothing. The version in each name hashes the family, the policy's log field names and the
cluster's log scope (`RecordingPlan.identity`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from digest.backends.recorded import Family, RecordingPlan
from digest.backends.scope import Matcher, render
from digest.checks.contract import Window
from digest.checks.envoy_flags import EnvoyFlagsCheck
from digest.checks.error_lines import ErrorLinesCheck
from digest.checks.log_questions import EVERY_LINE, AllOf, Filter, every
from digest.checks.log_storms import LogStormsCheck
from digest.pipeline.policy import Policy

# The families several checks read (error_lines, log_storms and coverage read ``pod_lines``): on a log store where each
# count reads every line of its window (Loki), their questions share one pass of it (`digest.backends.passes`).
SHARED_FAMILIES = ("pod_lines",)

# A question's filters and fields do not depend on its window: any one serves to read them.
_ANY_WINDOW = Window(datetime(2000, 1, 1, tzinfo=UTC), datetime(2000, 1, 2, tzinfo=UTC), UTC, "")


def _rest(scope: Filter, whole: Filter) -> Filter | None:
    """The filter that, with ``scope``, makes ``whole`` (``every(scope, rest) == whole``); None if there is none."""
    if scope == EVERY_LINE:
        return whole
    if isinstance(whole, AllOf) and whole.parts and whole.parts[0] == scope:
        return every(*whole.parts[1:])
    return None


def recording_plan(policy: Policy, logs_scope: Sequence[Matcher] = ()) -> RecordingPlan:
    """The families the enabled checks read, named for this policy's log field names and this cluster's log scope."""
    families: list[Family] = []
    errors = ErrorLinesCheck(policy.error_lines) if policy.enabled("error_lines") else None
    storms = LogStormsCheck(policy.log_storms) if policy.enabled("log_storms") else None
    if errors is not None or storms is not None:
        scope = errors.scope() if errors is not None else EVERY_LINE
        columns: list[tuple[str, Filter]] = [("total", EVERY_LINE)]
        if errors is not None:
            columns.append(("errors", errors.error_rule()))
        chatter = _rest(scope, storms.scope()) if storms is not None else None
        if storms is not None and chatter is None:
            families.append(Family("storm_lines", storms.scope(), ("namespace", "pod"), (("lines", EVERY_LINE),)))
        elif chatter is not None:
            columns.append(("chatter", chatter))
        families.insert(0, Family("pod_lines", scope, ("namespace", "pod", "node"), tuple(columns)))
    if policy.enabled("envoy_flags"):
        envoy = EnvoyFlagsCheck(policy.envoy_flags)
        question = envoy.log_question(_ANY_WINDOW)
        families.append(Family("access_lines", question.scope, question.by, question.columns))
    identity = repr((sorted(policy.logs.role_fields().items()), render(logs_scope)))
    return RecordingPlan(tuple(families), identity)
