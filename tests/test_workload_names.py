"""How a pod is named as its workload: from its controller where kube-state-metrics says it, else from its name."""

from __future__ import annotations

import pytest

from digest.checks.error_lines import owned_by, workload_of


@pytest.mark.parametrize(
    ("kind", "owner", "pod", "named"),
    [
        ("ReplicaSet", "api-7d9f8c6b5d", "api-7d9f8c6b5d-q2w4x", ("Deployment", "api")),
        ("ReplicaSet", "handmade", "handmade-q2w4x", ("ReplicaSet", "handmade")),
        ("StatefulSet", "postgres", "postgres-0", ("StatefulSet", "postgres")),
        ("DaemonSet", "csi-node", "csi-node-x7k2p", ("DaemonSet", "csi-node")),
        ("Job", "db-backup-29180520", "db-backup-29180520-x7k2p", ("CronJob", "db-backup")),
        ("Job", "migrate", "migrate-x7k2p", ("Job", "migrate")),
        ("<none>", "<none>", "toolbox-7", ("Pod", "toolbox-7")),
        ("Node", "pi5-1", "kube-apiserver-pi5-1", ("Node", "kube-apiserver-pi5-1")),
        ("Rollout", "web", "web-6c9f7b8d4-x7k2p", ("Rollout", "web")),
    ],
)
def test_a_pod_is_named_by_its_controller(kind: str, owner: str, pod: str, named: tuple[str, str]) -> None:
    """kube_pod_info's created_by labels give kind and workload; a bare or a static pod is named by itself."""
    assert owned_by(kind, owner, pod) == named


def test_a_pod_without_controller_labels_is_named_from_its_name() -> None:
    """No created_by_kind (a relabelling dropped it): no owner, and the name's shape decides as before."""
    assert owned_by("", "", "toolbox-7") is None
    assert workload_of("toolbox-7") == "toolbox"
    assert workload_of("api-7d9f8c6b5d-q2w4x") == "api"
