"""Cross-signal explanations on the corpus: each fires on its incident day and on no other day."""

from __future__ import annotations

from datetime import date

import pytest

from digest.checks.contract import Event, Finding, Offender, Quantity, Span, Status, Unit
from digest.pipeline.explain import explain
from digest.testbed.corpus import DAYS
from digest.testbed.embedded import EmbeddedBackends
from tests.test_incident_days import digest_of

# The rules that fire on each corpus day, with the cause each names ("" when it says it cannot tell).
EXPECTED: dict[date, dict[str, str]] = {
    date(2026, 7, 19): {},
    date(2026, 7, 20): {"blind_spot": ""},
    date(2026, 8, 12): {"no_healthy_upstream": "readiness", "blind_spot": ""},
    date(2026, 8, 16): {"idle_timeout": "idle_timeout"},
    date(2026, 8, 17): {},
    date(2026, 9, 8): {"no_healthy_upstream": "rollout", "blind_spot": ""},
    date(2026, 9, 15): {"idle_timeout": "idle_timeout"},
    date(2026, 10, 5): {},
    date(2026, 10, 20): {"no_healthy_upstream": "readiness", "blind_spot": ""},
    date(2026, 10, 28): {"no_healthy_upstream": "rollout", "blind_spot": ""},
    date(2026, 11, 5): {"stuck_rollout": "stuck_rollout", "blind_spot": ""},
    date(2026, 11, 12): {"no_healthy_upstream": "node_not_ready", "blind_spot": ""},
}


@pytest.mark.parametrize("day", sorted(DAYS), ids=str)
async def test_each_explanation_fires_on_its_day_only(corpus_backends: EmbeddedBackends, day: date) -> None:
    """The rules that fire on a corpus day, and the causes they name, are exactly those its data proves."""
    digest = await digest_of(corpus_backends, day)
    assert {e.rule: e.cause for e in digest.explanations} == EXPECTED[day]


async def test_quiet_endpoints_inversion_names_the_numbers(corpus_backends: EmbeddedBackends) -> None:
    """09-15: the UC ratio of quiet hours is several times the busy hours', with the worst hour named."""
    digest = await digest_of(corpus_backends, date(2026, 9, 15))
    [inversion] = [e for e in digest.explanations if e.rule == "idle_timeout"]
    assert "istio:pricing/quote" in inversion.text
    assert "in quiet hours vs" in inversion.text
    assert "worst at 04:00" in inversion.text


async def test_keepalive_race_names_the_idle_timeout_under_load(corpus_backends: EmbeddedBackends) -> None:
    """08-16: the 35 UC came in bursts under load; the explanation names the ordering without claiming an inversion."""
    digest = await digest_of(corpus_backends, date(2026, 8, 16))
    [explanation] = [e for e in digest.explanations if e.rule == "idle_timeout"]
    assert "35 × UC on httproute/shop/api/rule/0" in explanation.text
    assert "under load" in explanation.text


def test_log_storm_rule_needs_restarts_and_no_oom() -> None:
    """An error flood with restarts and no OOM is a log storm; with an OOM kill it is not."""
    errors = Finding(
        name="error_lines",
        status=Status.CRIT,
        penalty=2,
        value=900_000,
        summary="s",
        offenders=[Offender(labels={"namespace": "shop", "workload": "web"}, value=900_000)],
    )
    restarts = Finding(
        name="restarts",
        status=Status.WARN,
        penalty=0,
        value=7,
        summary="s",
        offenders=[
            Offender(
                labels={"namespace": "shop", "pod": "web-7c9d8f6b5d-x2x4k"},
                value=7,
                facts={"restarts": Quantity(7, Unit.COUNT)},
            )
        ],
    )
    no_oom = Finding(name="oom_kills", status=Status.OK, penalty=0, value=0, summary="s")
    oom = Finding(name="oom_kills", status=Status.WARN, penalty=1, value=1, summary="s")
    assert [e.rule for e in explain([errors, restarts, no_oom])] == ["log_storm"]
    assert explain([errors, restarts, oom]) == ()


# The UH rule's causes, as pure functions of findings: each names only what its evidence shows -----------------------

T0 = 1_786_000_000.0  # a moment; the spans below are relative to it


def _uh() -> Finding:
    return Finding(
        name="envoy_flags",
        status=Status.CRIT,
        penalty=2,
        value=7_212,
        summary="s",
        offenders=[Offender(labels={"upstream": "httproute/prod/fastapi/rule/0", "flag": "UH"}, value=7_212)],
    )


def _empty(*spans: Span, pods: str = "") -> Finding:
    seconds = sum(span.seconds for span in spans)
    facts = {
        "empty_seconds": Quantity(seconds, Unit.SECONDS),
        "episodes": Quantity(len(spans), Unit.COUNT),
        "longest_seconds": Quantity(max(span.seconds for span in spans), Unit.SECONDS),
        "resolution_seconds": Quantity(15, Unit.SECONDS),
    }
    labels = {"namespace": "prod", "service": "fastapi", **({"pods": pods} if pods else {})}
    offender = Offender(labels=labels, value=seconds, facts=facts, spans=spans)
    return Finding(
        name="empty_endpoints", status=Status.CRIT, penalty=0, value=seconds, summary="s", offenders=[offender]
    )


def _readiness(*pods: Offender, events: tuple[Event, ...] = (), probes: bool = False, nodes: bool = True) -> Finding:
    observed = ("kube_pod_status_ready",) + (("kube_node_status_condition",) if nodes else ())
    observed += ("prober_probe_total",) if probes else ()
    return Finding(
        name="readiness",
        status=Status.CRIT if pods else Status.OK,
        penalty=0,
        value=len(pods),
        summary="s",
        offenders=pods,
        observed=observed,
        events=events,
    )


def _unready_pod(name: str, *spans: Span, restarts: int | None = 0, node: str = "n1", **facts: float) -> Offender:
    values = {"not_ready_seconds": Quantity(sum(s.seconds for s in spans), Unit.SECONDS)}
    if restarts is not None:
        values["restarts"] = Quantity(restarts, Unit.COUNT)
    values.update({key: Quantity(value, Unit.COUNT) for key, value in facts.items()})
    labels = {"namespace": "prod", "pod": name, "state": "not ready", "node": node, "service": "fastapi"}
    return Offender(labels=labels, value=1, facts=values, spans=spans)


def _deployments(*events: Event, observable: bool = True) -> Finding:
    observed = ("kube_replicaset_created", "kube_deployment_metadata_generation") if observable else ()
    return Finding(
        name="deployments", status=Status.WARN, penalty=0, value=1, summary="s", observed=observed, events=events
    )


def _throttled() -> Finding:
    offender = Offender(
        labels={"namespace": "prod", "pod": "fastapi-abc-1", "container": "app"},
        value=0.62,
        facts={"throttled_ratio": Quantity(0.62, Unit.RATIO)},
    )
    return Finding(name="cpu_throttling", status=Status.WARN, penalty=0, value=1, summary="s", offenders=[offender])


def _rollout(deployment: str, start: float, strategy: str, state: str = "complete") -> Event:
    labels = {
        "namespace": "prod",
        "deployment": deployment,
        "replicaset": f"{deployment}-5d9f7c",
        "strategy": strategy,
        "state": state,
    }
    return Event("rollout", labels, Span(T0 + start, T0 + start + 120))


EPISODES = (Span(T0 + 600, T0 + 900), Span(T0 + 3_600, T0 + 3_660))


def _cause(*findings: Finding) -> tuple[str, str]:
    [explanation] = [e for e in explain(findings) if e.rule == "no_healthy_upstream"]
    return explanation.cause, explanation.text


def test_unready_pods_under_throttling_without_a_rollout_name_readiness() -> None:
    """UH, empty Service, its pods unready without a restart, throttled, no ReplicaSet: readiness, "no rollout"."""
    pods = [_unready_pod(f"fastapi-abc-{i}", Span(T0 + 500, T0 + 950)) for i in range(4)]
    cause, text = _cause(_uh(), _empty(*EPISODES), _readiness(*pods), _deployments(), _throttled())
    assert cause == "readiness"
    assert (
        "4 of its pods went unready without a restart under CPU throttling (fastapi-abc-1: 62 % over the day)" in text
    )
    assert "; no rollout that day." in text
    assert "Recreate" not in text
    assert "readiness probes failed" not in text  # prober not scraped: no count, not "0 failed"


def test_without_rollout_families_readiness_evidence_still_speaks_but_says_what_it_could_not_see() -> None:
    """No ReplicaSet families: the unready pods are still evidence, and the sentence says rollouts were not seen."""
    pods = [_unready_pod("fastapi-abc-1", Span(T0 + 500, T0 + 950))]
    cause, text = _cause(_uh(), _empty(*EPISODES), _readiness(*pods), _deployments(observable=False), _throttled())
    assert cause == "readiness"
    assert "; rollouts not observable." in text


def test_no_readiness_nor_rollout_evidence_says_it_cannot_tell() -> None:
    """UH, no pod seen unready (readiness observed) and no rollout families: only a rollout is possible, no cause."""
    cause, text = _cause(_uh(), _empty(*EPISODES), _readiness(), _deployments(observable=False))
    assert cause == ""
    assert "possibly a rollout, the data cannot tell — rollout state not observable" in text
    assert "failing readiness" not in text
    assert "Recreate" not in text


def test_a_recreate_rollout_in_the_episodes_is_named_with_its_strategy() -> None:
    """A new ReplicaSet of the Service's Deployment inside an empty episode: a rollout, strategy Recreate."""
    cause, text = _cause(_uh(), _empty(*EPISODES), _readiness(), _deployments(_rollout("fastapi", 610, "Recreate")))
    assert cause == "rollout"
    assert "a rollout of prod/fastapi (strategy Recreate" in text


def test_throttling_of_other_pods_in_the_namespace_is_not_named() -> None:
    """Another workload of the namespace was throttled, not the Service's pods: no "under CPU throttling"."""
    pods = [_unready_pod("fastapi-def-9", Span(T0 + 500, T0 + 950))]
    cause, text = _cause(_uh(), _empty(*EPISODES), _readiness(*pods), _deployments(), _throttled())
    assert cause == "readiness"
    assert "under CPU throttling" not in text
    assert "with no CPU throttling seen on them" in text


def test_a_rollout_at_another_time_is_not_the_cause() -> None:
    """A RollingUpdate of another Deployment hours away from the episodes does not explain them."""
    pods = [_unready_pod("fastapi-abc-1", Span(T0 + 500, T0 + 950))]
    other = _rollout("worker", 20_000, "RollingUpdate")
    cause, _ = _cause(_uh(), _empty(*EPISODES), _readiness(*pods), _deployments(other), _throttled())
    assert cause == "readiness"


def test_a_node_not_ready_under_the_pods_comes_before_readiness() -> None:
    """The Service's pods went unready while their node was NotReady: the node is the cause, not their probes."""
    node = Event("node_not_ready", {"node": "n2"}, Span(T0 + 400, T0 + 1_000))
    pod = _unready_pod("fastapi-abc-1", Span(T0 + 440, T0 + 1_000), node="n2", with_node_not_ready_seconds=560)
    cause, text = _cause(_uh(), _empty(EPISODES[0]), _readiness(pod, events=(node,)), _deployments())
    assert cause == "node_not_ready"
    assert "node n2 was NotReady for 10 min" in text


def test_absent_numbers_are_not_zero() -> None:
    """A fact that was not measured reads as None, and a measured zero as 0.0."""
    pod = _unready_pod("fastapi-abc-1", Span(T0, T0 + 60), restarts=None)
    assert pod.fact("restarts") is None
    assert _unready_pod("fastapi-abc-2", Span(T0, T0 + 60)).fact("restarts") == 0.0


def test_another_deployments_rollout_in_the_episodes_is_not_claimed() -> None:
    """A rollout of a Deployment that nothing ties to the Service, at the same time: named as untied, no cause."""
    other = _rollout("worker", 610, "Recreate")
    cause, text = _cause(_uh(), _empty(*EPISODES), _readiness(), _deployments(other))
    assert cause == ""
    assert "a rollout of prod/worker overlapped, but nothing in the data ties it to this Service" in text


def test_a_rollout_is_tied_to_a_differently_named_service_by_the_pods_it_listed() -> None:
    """Service fastapi listed pods of Deployment fastapi-v2: that Deployment's rollout in the episodes is the cause."""
    listed = "fastapi-v2-7d9c8b6f5d-x2x4k"
    rollout = _rollout("fastapi-v2", 610, "Recreate")
    cause, text = _cause(_uh(), _empty(*EPISODES, pods=listed), _readiness(), _deployments(rollout))
    assert cause == "rollout"
    assert "a rollout of prod/fastapi-v2 (strategy Recreate" in text


def test_without_node_conditions_unready_pods_are_not_blamed_on_their_probes() -> None:
    """Pods unready without a restart and no node condition series: probes or node, the sentence cannot tell."""
    pods = [_unready_pod(f"fastapi-abc-{i}", Span(T0 + 500, T0 + 950)) for i in range(2)]
    cause, text = _cause(_uh(), _empty(*EPISODES), _readiness(*pods, nodes=False), _deployments())
    assert cause == ""
    assert "failing readiness probes or their node stopping to report, the data cannot tell which" in text
    assert "CPU limit" not in text


def test_another_deployments_rollout_does_not_make_it_a_day_without_rollouts() -> None:
    """Readiness is the cause, and the sentence says no rollout of its Deployment, not "no rollout that day"."""
    pods = [_unready_pod("fastapi-abc-1", Span(T0 + 500, T0 + 950))]
    other = _rollout("worker", 20_000, "RollingUpdate")
    _, text = _cause(_uh(), _empty(*EPISODES), _readiness(*pods), _deployments(other), _throttled())
    assert "; no rollout of its Deployment." in text


def test_uh_is_not_explained_by_another_services_emptiness() -> None:
    """UH on the fastapi route while only prod/cart was empty (its Recreate rollout): cannot tell, cart not blamed."""
    empty = _empty(*EPISODES)
    cart = Offender(
        labels={**empty.offenders[0].labels, "service": "cart"},
        value=empty.offenders[0].value,
        facts=empty.offenders[0].facts,
        spans=empty.offenders[0].spans,
    )
    only_cart = Finding(name="empty_endpoints", status=Status.CRIT, penalty=0, value=1, summary="s", offenders=[cart])
    rollout = _rollout("cart", 610, "Recreate")
    cause, text = _cause(_uh(), only_cart, _readiness(), _deployments(rollout))
    assert cause == ""
    assert "the data cannot tell why" in text
    assert "a rollout of prod/cart" not in text
    assert "nothing in the data ties the route to prod/cart" in text


def test_without_node_conditions_a_node_that_kept_reporting_leaves_readiness_and_throttling() -> None:
    """No node condition series, but the pods' node answered all through: readiness is the cause, throttling named."""
    pods = [
        _unready_pod("fastapi-abc-1", Span(T0 + 500, T0 + 950), node_reported_seconds=450),
        _unready_pod("fastapi-abc-2", Span(T0 + 500, T0 + 950), node_reported_seconds=450),
    ]
    cause, text = _cause(_uh(), _empty(*EPISODES), _readiness(*pods, nodes=False), _deployments(), _throttled())
    assert cause == "readiness"
    assert "under CPU throttling (fastapi-abc-1: 62 %" in text
    assert "their nodes' kubelet answered throughout" in text
    assert "cannot tell" not in text


def _crash_looping(reasons: str, **facts: float) -> Finding:
    values = {"restarts": Quantity(192, Unit.COUNT)}
    values.update({key: Quantity(value, Unit.COUNT) for key, value in facts.items()})
    offender = Offender(
        labels={"namespace": "shop", "pod": "x-7d9c8b6f5d-x2x4k", "container": "app", "reasons": reasons},
        value=192,
        facts=values,
    )
    return Finding(name="restarts", status=Status.CRIT, penalty=0, value=192, summary="s", offenders=[offender])


def test_a_quiet_crash_loop_is_explained_on_its_own_evidence() -> None:
    """192 restarts with few error lines: the crash loop is explained from its exit reasons, not left unsaid."""
    [explanation] = [e for e in explain([_crash_looping("Error")]) if e.rule == "crash_loop"]
    assert explanation.cause == "crash_loop"
    assert explanation.text.startswith("Crash loop: shop/x-7d9c8b6f5d-x2x4k/app restarted 192 times")
    assert "exit reasons: Error" in explanation.text


def test_a_crash_loop_without_reasons_says_it_cannot_tell() -> None:
    """No exit reason and no probe failure: the sentence names no cause."""
    [explanation] = [e for e in explain([_crash_looping("reason unknown")]) if e.rule == "crash_loop"]
    assert explanation.cause == ""
    assert "why is not in the data" in explanation.text


def test_a_liveness_kill_loop_names_the_probe() -> None:
    """Restarts the kubelet made after failed liveness probes are named as the probe's."""
    [explanation] = [
        e for e in explain([_crash_looping("reason unknown", liveness_failures=576)]) if e.rule == "crash_loop"
    ]
    assert explanation.cause == "liveness"
    assert "576 failed liveness probes" in explanation.text


def test_uh_at_another_time_than_the_empty_episodes_is_not_explained_by_them() -> None:
    """UH answers in the 20:00 hour, the Service empty only around 00:10: the emptiness is not their cause."""
    uh = _uh()
    late = Offender(labels=uh.offenders[0].labels, value=uh.offenders[0].value, spans=(Span(T0 + 72_000, T0 + 75_600),))
    answers = Finding(name="envoy_flags", status=Status.CRIT, penalty=2, value=7_212, summary="s", offenders=[late])
    cause, text = _cause(answers, _empty(*EPISODES), _readiness(), _deployments(_rollout("fastapi", 610, "Recreate")))
    assert cause == ""
    assert "had no ready endpoint only at other times of the day" in text
