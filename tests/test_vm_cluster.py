"""A VictoriaMetrics cluster at DIGEST_VM_URL: vmselect, vminsert and vmstorage are named, and a missing tenant fixed.

No registry this project installs from ships the cluster's binaries (Debian packages the single node only), so the
suite cannot start a vmselect. These tests serve, on loopback, the answers a real VictoriaMetrics v1.120.0 cluster
gave to the requests the digest sends to tell backends apart (tests/fixtures/vm-cluster/responses.json, recorded
from vmselect, vminsert and vmstorage built from the v1.120.0-cluster tag, and a v1.120.0 single node; see
tests/fixtures/README.md). Every other path answers as those servers do: a vmselect asked without a tenant says
400 "auth error: cannot parse authToken", and a query under a tenant that holds nothing an empty result.
Tenant scoping itself (DIGEST_VM_TENANT reading one tenant's series and no other's) is not in this file: it was
checked against the real cluster by hand, and the URL it builds is tested in tests/test_cluster_scope.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from digest.backends.http import Endpoint, HttpSource, cluster_fix, same_tenant, vm_tenant_of
from digest.testbed.embedded import EmbeddedBackends
from tests.command import backend_env, run_digest
from tests.loopback import serving
from tests.misbehaving_server import QuietHandler

RECORDED = json.loads((Path(__file__).parent / "fixtures" / "vm-cluster" / "responses.json").read_text())["components"]
AT = "2026-07-21T00:00:00Z"
_TENANT_QUERY = re.compile(r"^/select/[^/]+/prometheus(?P<api>/api/v1/(?:query|query_range|status/buildinfo))$")


def _recorded(component: str, method: str, path: str) -> dict[str, Any] | None:
    return next(
        (row for row in RECORDED[component] if row["method"] == method and row["path"] == path),
        None,
    )


def _answer(component: str, method: str, path: str) -> tuple[int, str, str]:
    """What the recorded server answers ``method path``: its recorded answer, else the answer of its kind of path."""
    row = _recorded(component, method, path) or _recorded(component, "GET", path)
    if row is None and component == "vmselect":
        tenant_path = _TENANT_QUERY.match(path)
        if tenant_path:  # any tenant answers as tenant 5, which holds nothing
            row = _recorded("vmselect", method, f"/select/5/prometheus{tenant_path['api']}") or _recorded(
                "vmselect", "GET", f"/select/5/prometheus{tenant_path['api']}"
            )
        elif path.startswith("/admin/tenants"):
            row = _recorded("vmselect", "GET", "/admin/tenants")
        else:  # vmselect reads the path's second segment as a tenant
            second = [*path.split("/"), "", ""][2]
            body = _recorded("vmselect", "POST", "/api/v1/query")
            assert body is not None
            text = body["body"].replace("/api/v1/query?query=up&time=1796417000", path).replace('"v1"', f'"{second}"')
            return 400, body["content_type"], text
    if row is None:  # vminsert and vmstorage: every other path is "unsupported"
        template = _recorded(component, "GET", "/api/v1/status/buildinfo")
        assert template is not None
        return 400, template["content_type"], template["body"].replace("/api/v1/status/buildinfo", path)
    return row["status"], row["content_type"], row["body"]


@contextmanager
def recorded_server(component: str) -> Iterator[str]:
    """The recorded answers of ``component`` ("vmselect", "vminsert", "vmstorage", "victoria-metrics") on loopback."""

    class Handler(QuietHandler):
        def reply(self) -> None:
            length = int(self.headers.get("Content-Length", "0") or 0)
            if length:
                self.rfile.read(length)
            status, content_type, body = _answer(component, self.command, urlsplit(self.path).path)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    with serving(Handler) as url:
        yield url


async def _answers(url: str) -> str | None:
    source = HttpSource(Endpoint("VictoriaMetrics", url, setting="DIGEST_VM_URL"))
    try:
        return await source.what_answers()
    finally:
        await source.aclose()


@pytest.mark.parametrize(
    ("component", "path", "expected"),
    [
        ("vmselect", "", "a vmselect"),
        ("vmselect", "/select/0/prometheus", "a vmselect"),
        ("vminsert", "", "a vminsert"),
        ("vmstorage", "", "a vmstorage"),
        ("victoria-metrics", "", "a VictoriaMetrics"),
    ],
)
async def test_each_part_of_a_victoriametrics_cluster_is_named(component: str, path: str, expected: str) -> None:
    """A vmselect (with or without a tenant), a vminsert, a vmstorage and a 1.120 single node are told apart."""
    with recorded_server(component) as url:
        assert await _answers(url + path) == expected


async def test_a_modern_single_node_is_not_taken_for_prometheus() -> None:
    """VictoriaMetrics 1.120 reports Prometheus' version 2.24.0 in its build info, and is still a VictoriaMetrics."""
    row = _recorded("victoria-metrics", "GET", "/api/v1/status/buildinfo")
    assert row is not None
    assert json.loads(row["body"])["data"] == {"version": "2.24.0"}
    with recorded_server("victoria-metrics") as url:
        assert await _answers(url) == "a VictoriaMetrics"


def test_the_tenant_fix_names_the_setting_and_the_tenants() -> None:
    """Without a tenant the fix names DIGEST_VM_TENANT and the tenants that hold data; a tenant URL needs none."""
    fix = cluster_fix("a vmselect", "http://vmselect:8481", ["0:0", "7:3"])
    assert fix == (
        "vmselect reads one tenant per URL: set DIGEST_VM_TENANT, e.g. 0 for the default tenant "
        "(tenants with data here: 0:0, 7:3)"
    )
    assert cluster_fix("a vmselect", "http://vmselect:8481/select/7:3/prometheus") is None
    assert vm_tenant_of("http://vmselect:8481/select/7:3/prometheus/") == "7:3"
    assert same_tenant("7", "7:0")
    assert not same_tenant("7", "7:3")


def test_doctor_names_a_vmselect_without_tenant_and_its_fix(corpus_backends: EmbeddedBackends) -> None:
    """`digest doctor` at a vmselect with no tenant: "a vmselect", the fix with the tenants holding data, exit 2."""
    with recorded_server("vmselect") as url:
        env = backend_env(corpus_backends) | {"DIGEST_VM_URL": url}
        result = run_digest("doctor", "--at", AT, "--format", "json", env=env, timeout=300)
    assert result.returncode == 2, result.stderr
    metrics = json.loads(result.stdout)["urls"][0]
    assert metrics["answers"] == "a vmselect"
    assert not metrics["ok"]
    assert metrics["fix"] == cluster_fix("a vmselect", url, ["0:0", "7:3"])


@pytest.mark.parametrize(("tenant", "fine"), [("5", False), ("7:3", True), ("0", True)])
def test_doctor_checks_the_tenant_holds_data(corpus_backends: EmbeddedBackends, tenant: str, fine: bool) -> None:
    """A tenant vmselect lists is a right URL; one it does not is named with the tenants that hold data."""
    with recorded_server("vmselect") as url:
        env = backend_env(corpus_backends, DIGEST_VM_TENANT=tenant) | {"DIGEST_VM_URL": url}
        result = run_digest("doctor", "--at", AT, "--format", "json", env=env, timeout=300)
    metrics = json.loads(result.stdout)["urls"][0]
    assert metrics["answers"] == "a vmselect"
    assert metrics["url"].endswith(f"/select/{tenant}/prometheus")
    if fine:
        assert metrics["ok"], metrics
    else:
        assert metrics["fix"] == "tenant 5 holds no data in the 24 h: set DIGEST_VM_TENANT to one that does (0:0, 7:3)"
        assert result.returncode == 2


def test_doctor_names_a_vminsert_given_for_vmselect(corpus_backends: EmbeddedBackends) -> None:
    """DIGEST_VM_URL at a vminsert: named, with the fix to point at vmselect, exit 2."""
    with recorded_server("vminsert") as url:
        result = run_digest(
            "doctor", "--at", AT, env=backend_env(corpus_backends) | {"DIGEST_VM_URL": url}, timeout=300
        )
    assert result.returncode == 2, result.stderr
    assert f"✗ DIGEST_VM_URL {url}: a vminsert answers, but VictoriaMetrics was expected" in result.stdout
    assert "point DIGEST_VM_URL at vmselect (port 8481), set DIGEST_VM_TENANT" in result.stdout


def test_a_digest_at_a_vmselect_without_tenant_says_the_fix_once(corpus_backends: EmbeddedBackends) -> None:
    """`digest run` at a vmselect without a tenant: every metrics check blind, the tenant fix said once."""
    with recorded_server("vmselect") as url:
        result = run_digest("run", "--date", "2026-07-20", env=backend_env(corpus_backends) | {"DIGEST_VM_URL": url})
    assert result.returncode == 0, result.stderr
    blind = [line for line in result.stdout.splitlines() if line.startswith("? ")]
    said = [line for line in blind if "asked without a tenant" in line]
    assert len(said) == 1, blind
    assert "set DIGEST_VM_TENANT, e.g. 0 for the default tenant (tenants with data here: 0:0, 7:3)" in said[0]
    assert "? conntrack not checked · as oom_kills" in result.stdout
