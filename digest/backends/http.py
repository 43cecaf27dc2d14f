"""HTTP clients of the two backends, and the one place where their failures become `SourceError`.

VictoriaMetrics is spoken to through the Prometheus HTTP API (`/api/v1/query` with `time=`, `/api/v1/query_range`),
so vmselect (with its `/select/<tenant>/prometheus` prefix) and Prometheus work too. VictoriaLogs is spoken to
through `/select/logsql/stats_query` and `/select/logsql/stats_query_range`: every count is computed by the backend,
no log line is ever downloaded. Tenants go in `AccountID`/`ProjectID` headers.

Each source bounds its concurrent queries with a semaphore, each query with a timeout, and each answer's size: the
body is streamed and reading stops at `Endpoint.max_response_bytes` (a Content-Length above it is refused before
any of the body is read), because a proxy or backend answering 300 MB would otherwise be held whole in memory — many
times over once decoded — and a pod's memory limit would kill the digest before it could say anything. Whatever goes
wrong (refused connection, DNS, timeout, HTTP error, an HTML error page, malformed JSON, an answer too large) is
translated here, once, into `SourceError`; messages never contain credentials, query strings or response bodies
beyond the backend's own short error text.

Compressed answers are inflated here, not by httpx: the raw stream is read and each chunk inflated with zlib's
``max_length`` so that no call produces more than what is left under the cap (plus one byte, to notice the
overflow). httpx's own decoder inflates a whole network chunk in one call, and a chunk of gzip can hold a thousand
times its size. Only a single ``gzip`` or ``deflate`` coding is accepted: stacked codings (``gzip, gzip``, where
one small chunk of the outer layer is a huge inner one) and codings the digest did not ask for are refused.

A question that carries an `AnswerClock` (`ShapeCount.clock`) is bounded by it from the moment its first request
takes a slot, not from when it was asked: the time spent waiting behind other checks' queries is the digest's, not
the backend's, and a "no answer" must be the backend's.

Credentials written into a URL (``http://user:pass@host/``) are taken out of it before httpx sees it and sent as
basic auth instead: httpx logs every request URL at INFO, userinfo included.
"""

from __future__ import annotations

import asyncio
import errno
import heapq
import itertools
import json
import logging
import math
import random
import re
import socket
import ssl
import traceback
import zlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from digest.checks.contract import RangeSeries, Sample, SourceError, SourceErrorKind, fmt_duration
from digest.checks.log_questions import AnswerClock

log = logging.getLogger(__name__)
# One line per backend query with -v: its backend, path, window, status, time and answer size, and the query itself.
queries_log = logging.getLogger("digest.queries")
_QUERY_SHOWN = 600  # characters of a query in its log line (a LogsQL count with its filters runs to a few hundred)

_MAX_ERROR_TEXT = 300
# A rejected query's reason is kept up to this long: VictoriaMetrics says why after echoing the whole query, and a
# reason cut off ("duplicate series on the left side of …") tells the reader nothing. Bounded all the same.
_MAX_REASON_TEXT = 2000
# The query a backend echoes in its error (``error when executing query="…" on the time range …``): we sent it, the
# reader of the digest does not need it back, and it is what pushed the reason out of sight.
_ECHOED_QUERY = re.compile(r'query="(?:[^"\\]|\\.)*"')
MIB = 1024 * 1024
DEFAULT_MAX_RESPONSE_MIB = 32
# How an answer cut at `Endpoint.max_response_bytes` is said (`SourceError.message` starts with it).
TOO_LARGE = "response larger than"

# The clock of the question a source is answering (`answering_within`), read where each of its requests takes a
# slot. A context variable rather than a parameter through every helper: the tasks a question's requests run in
# inherit it, and the requests of other questions, in other tasks, never see it.
_ANSWER_CLOCK: ContextVar[AnswerClock | None] = ContextVar("answer_clock", default=None)


@contextmanager
def answering_within(clock: AnswerClock | None) -> Iterator[None]:
    """Bound the requests sent inside the block by ``clock`` (None: by the query timeout only)."""
    token = _ANSWER_CLOCK.set(clock)
    try:
        yield
    finally:
        _ANSWER_CLOCK.reset(token)


# Whether the requests of the running task are asked ahead (`asked_ahead`): a context variable, like the clock.
_AHEAD: ContextVar[bool] = ContextVar("asked_ahead", default=False)


@contextmanager
def asked_ahead() -> Iterator[None]:
    """Let the requests sent inside the block take a free slot of their source before the others waiting for one."""
    token = _AHEAD.set(True)
    try:
        yield
    finally:
        _AHEAD.reset(token)


class QueryGate:
    """At most ``limit`` requests of a source in flight; those asked ahead (`asked_ahead`) wait for a slot first.

    When every slot is taken, the requests waiting get one in the order they came, those asked ahead before the
    others. The digest's checks queue some 200 queries at once on the metrics backend. A few of them begin a chain:
    recorded log counts, on whose answer the log checks' next questions (the shapes of the worst workloads' errors, on
    the log backend) wait. In order of arrival they wait their turn behind the rest, and the log backend sits idle
    meanwhile; ahead, the two backends work at the same time.
    """

    def __init__(self, limit: int) -> None:
        self._free = max(1, limit)
        # Waiting requests as (0 ahead / 1 not, arrival number, their admission): a heap, the next one first. Free
        # slots are only ever left while nobody waits.
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    async def __aenter__(self) -> None:
        if self._free > 0:
            self._free -= 1
            return
        admitted = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (0 if _AHEAD.get() else 1, next(self._arrivals), admitted))
        try:
            await admitted
        except asyncio.CancelledError:
            if admitted.done() and not admitted.cancelled():
                self._release()  # admitted just as it was cancelled: the slot goes on to the next one
            raise  # otherwise left in the heap, cancelled: `_release` passes over it

    async def __aexit__(self, *exc_info: object) -> None:
        self._release()

    def _release(self) -> None:
        while self._waiting:
            _, _, admitted = heapq.heappop(self._waiting)
            if not admitted.done():
                admitted.set_result(None)
                return
        self._free += 1


# What identifies a request in flight: its path, its form, and the answer clock bounding it (its id), if any.
_FlightKey = tuple[str, tuple[tuple[str, str], ...], int | None]


def status_words(status: int, setting: str = "", text: str = "") -> str | None:
    """Plain words for an HTTP status that refuses or fails every request, or None for the others.

    ``setting`` is the variable naming the URL (``DIGEST_VM_URL``): the credentials' variables are named after it.
    ``text`` is the answer's body, which says more for a multi-tenant Loki (401 "no org id").
    """
    prefix = setting.removesuffix("_URL")
    credentials = f" ({prefix}_BEARER_TOKEN_FILE, or {prefix}_USERNAME with {prefix}_PASSWORD_FILE)" if prefix else ""
    if status == 401 and "no org id" in text.lower():
        return "HTTP 401 Unauthorized: a multi-tenant Loki wants its tenant (DIGEST_LOKI_TENANT, sent as X-Scope-OrgID)"
    words = {
        401: f"it wants credentials{credentials}",
        403: f"the credentials sent may not read it{credentials}",
        407: "a proxy between here and the store wants credentials (the proxy URL's user and password)",
        429: "the store or a proxy in front of it is limiting the rate",
        500: "the server failed on its side",
        502: "a proxy in front of the store could not reach it",
        503: "the store is starting or overloaded, or a proxy in front of it has no healthy backend",
        504: "a proxy in front of the store gave up waiting for it",
    }.get(status)
    # Every status above is a standard one: its phrase is known.
    return None if words is None else f"HTTP {status} {HTTPStatus(status).phrase}: {words}"


@dataclass(frozen=True)
class Endpoint:
    """Where a backend lives and how to authenticate to it."""

    name: str  # "VictoriaMetrics" / "VictoriaLogs": used in messages
    url: str  # base URL including any path prefix
    headers: Mapping[str, str] = field(default_factory=dict)
    basic_auth: tuple[str, str] | None = None
    timeout_seconds: float = 30.0
    max_concurrency: int = 4
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_MIB * MIB
    setting: str = ""  # the variable that names this URL ("DIGEST_VL_URL"), for messages that say what to change

    @property
    def display_url(self) -> str:
        """The base URL without user info, query or fragment, safe for logs and messages."""
        return without_userinfo(self.url)

    @property
    def request_auth(self) -> tuple[str, str] | None:
        """The basic-auth pair to send: the configured one, else the user info written in the URL (decoded)."""
        if self.basic_auth is not None:
            return self.basic_auth
        return url_userinfo(self.url)


# Paths users copy from an API call into a base URL, per kind of backend, longest first.
_API_SUFFIXES = {
    "VictoriaMetrics": ("/api/v1/query_range", "/api/v1/query", "/api/v1"),
    "Loki": ("/loki/api/v1/query_range", "/loki/api/v1/query", "/loki/api/v1", "/loki/api", "/loki"),
    "VictoriaLogs": ("/select/logsql/query", "/select/logsql/stats_query", "/select/logsql", "/select"),
}


def url_fix(kind: str, url: str) -> str | None:
    """The fix for a base URL that carries an API path ("drop the /api/v1 suffix: http://vm:8428"), else None."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    for suffix in _API_SUFFIXES.get(kind, ()):
        if path.endswith(suffix):
            base = without_userinfo(urlunsplit(parts._replace(path=path[: -len(suffix)], query="", fragment="")))
            return f"drop the {suffix} suffix: the base URL is {base}"
    return None


# The components of a VictoriaMetrics cluster each serve a root page that starts "vmselect - a component of
# VictoriaMetrics cluster". It is the only thing a vmselect asked without a tenant says about itself: every API path
# answers 400 "auth error: cannot parse authToken", and a vminsert or vmstorage answers "unsupported path".
_CLUSTER_COMPONENTS = ("vmselect", "vminsert", "vmstorage")
_CLUSTER_PAGE = " - a component of VictoriaMetrics cluster"
# vmselect's per-tenant prefix, and the tenant written in it ("0", "7:3", "multitenant").
_TENANT_PATH = re.compile(r"/select/(?P<tenant>[^/]+)/prometheus$")
# What vmselect answers when the first path segment after /select/ is not a tenant (no tenant in the URL).
_NO_TENANT = "cannot parse authtoken"
_MAX_TENANTS_NAMED = 20


def vm_tenant_of(url: str) -> str | None:
    """The VictoriaMetrics cluster tenant written in a vmselect URL's ``/select/<tenant>/prometheus``, else None."""
    found = _TENANT_PATH.search(urlsplit(url).path.rstrip("/"))
    return found["tenant"] if found else None


def same_tenant(written: str, listed: str) -> bool:
    """Whether a tenant as configured ("7", "7:0") is one vmselect lists ("7:0"): a missing projectID is 0."""

    def full(tenant: str) -> str:
        return tenant if ":" in tenant else f"{tenant}:0"

    return full(written.strip()) == full(listed.strip())


def cluster_fix(answers: str | None, url: str, tenants: Iterable[str] = ()) -> str | None:
    """The fix when a VictoriaMetrics URL is the wrong part of a VictoriaMetrics cluster, else None.

    A vmselect needs a tenant in its path; a vminsert only writes and a vmstorage only stores. ``tenants`` are those
    the vmselect holds data for, named so the reader can pick one.
    """
    held = f" (tenants with data here: {', '.join(tenants)})" if tenants else ""
    if answers == "a vmselect" and vm_tenant_of(url) is None:
        return f"vmselect reads one tenant per URL: set DIGEST_VM_TENANT, e.g. 0 for the default tenant{held}"
    if answers in ("a vminsert", "a vmstorage"):
        component = answers.removeprefix("a ")
        return f"{component} answers no queries: point DIGEST_VM_URL at vmselect (port 8481), set DIGEST_VM_TENANT"
    return None


def without_userinfo(url: str) -> str:
    """``url`` without its ``user:password@`` part, query and fragment; the host keeps its IPv6 brackets and port."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def url_userinfo(url: str) -> tuple[str, str] | None:
    """The percent-decoded ``(user, password)`` written in ``url``, or None when it has none."""
    parts = urlsplit(url)
    if not parts.username and not parts.password:
        return None
    return unquote(parts.username or ""), unquote(parts.password or "")


def _window_of(form: Mapping[str, str]) -> str:
    """The time a query is asked at, or its range and step, as its form says (Prometheus, VictoriaLogs, Loki)."""
    if "start" in form or "end" in form:
        step = f" step {form['step']}" if "step" in form else ""
        return f"{form.get('start', '?')} to {form.get('end', '?')}{step}"
    return f"at {form['time']}" if "time" in form else "(no time)"


def _shown(query: str) -> str:
    flat = " ".join(query.split())
    return flat if len(flat) <= _QUERY_SHOWN else flat[:_QUERY_SHOWN] + f"… ({len(flat):,} characters)"


def why_unreachable(error: BaseException, url: str) -> str:
    """Why a connection to ``url`` failed, as a reader fixes it: DNS, refused, unreachable, TLS, or a timeout.

    httpx wraps the socket's own error (``ConnectError`` from httpcore's, from the OSError), so the chain of causes
    is read for it, as Grafana's "Save & test" tells these apart. Unknown: the exception's type, as before.
    """
    parts = urlsplit(url)
    host = parts.hostname or "?"
    try:
        port: int | str = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a port out of range (99999): said as written, the settings let it through to the socket
        port = parts.netloc.rsplit(":", 1)[-1]
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, socket.gaierror):
            return f"the name {host} does not resolve (DNS: a typo, or a cluster-internal name asked from outside)"
        if isinstance(cause, ssl.SSLCertVerificationError):
            reason = cause.verify_message or cause.reason or "not trusted"
            return (
                f"TLS: the certificate of {host} is not trusted ({reason}; SSL_CERT_FILE names a CA bundle that "
                "signs it)"
            )
        if isinstance(cause, ssl.SSLError):
            if "WRONG_VERSION_NUMBER" in str(cause) or "record layer" in str(cause):
                return f"TLS handshake failed: {host}:{port} speaks plain HTTP (write http://, not https://)"
            return f"TLS handshake with {host}:{port} failed ({cause.reason or cause})"
        if isinstance(cause, ConnectionRefusedError):
            return f"connection refused: nothing listens on {host}:{port} (a wrong port, or the server is down)"
        if isinstance(cause, (httpx.ConnectTimeout, httpx.PoolTimeout, TimeoutError)):
            return f"no answer from {host}:{port} (timed out: a wrong address, or a firewall dropping the connection)"
        if isinstance(cause, OSError) and cause.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return f"{host} is unreachable from here (no route: a wrong address, or another network)"
        cause = cause.__cause__ or cause.__context__
    return f"cannot connect ({type(error).__name__})"


def tls_context(urls: Iterable[str]) -> ssl.SSLContext:
    """One TLS context for the backends' clients, built once: the CA bundle is loaded only if a URL is https.

    Loading the bundle costs tens of milliseconds per client, at every start of ``digest run``. For plain-HTTP
    backends the context is never used; it is an empty one that still verifies certificates and host names, so it
    fails closed rather than open if it ever were.
    """
    if any(urlsplit(url).scheme == "https" for url in urls):
        return httpx.create_ssl_context()
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class HttpSource:
    """Shared transport: one httpx client, a concurrency bound, and the error translation."""

    # Whether an answer's ``warnings`` other than PromQL's own notes mean it is partial (`partial_warning`).
    refuses_warnings = False

    def __init__(
        self,
        endpoint: Endpoint,
        transport: httpx.AsyncBaseTransport | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._endpoint = endpoint
        credentials = endpoint.request_auth
        auth = httpx.BasicAuth(*credentials) if credentials else None
        self._client = httpx.AsyncClient(
            headers=dict(endpoint.headers),
            auth=auth,
            verify=tls if tls is not None else tls_context([endpoint.url]),
            timeout=httpx.Timeout(endpoint.timeout_seconds),
            transport=transport,
            follow_redirects=False,
        )
        self._gate = QueryGate(endpoint.max_concurrency)
        # Never the URL as written: httpx would log its user info with every request.
        self._base = without_userinfo(endpoint.url).rstrip("/")
        self._in_flight: dict[_FlightKey, asyncio.Task[Any]] = {}
        self._identified: asyncio.Task[str] | None = None
        self.queries_sent = 0

    @property
    def name(self) -> str:
        return self._endpoint.name

    async def aclose(self) -> None:
        # A query whose callers all gave up may still be running: stop it before its client goes away.
        leftover = list(self._in_flight.values())
        for task in leftover:
            task.cancel()
        await asyncio.gather(*leftover, return_exceptions=True)
        await self._client.aclose()

    def _error(self, kind: SourceErrorKind, message: str) -> SourceError:
        return SourceError(self._endpoint.name, kind, message)

    def _unreachable(self, cause: BaseException) -> SourceError:
        """The backend could not be reached at all (no connection), with why (`why_unreachable`)."""
        return self._error(
            SourceErrorKind.UNREACHABLE,
            f"cannot reach {self._endpoint.display_url}: {why_unreachable(cause, self._base)}",
        )

    async def reach(self) -> str | None:
        """Why nothing known answers at this URL, or None when something does.

        Nothing at all (DNS, refused, timeout, TLS: `why_unreachable`), or a server that refuses or fails every
        request: an authenticating proxy's 401 or 403, a gateway's 502, 503 or 504 (`status_words`).
        """
        try:
            async with asyncio.timeout(min(5.0, self._endpoint.timeout_seconds)):
                response = await self._client.request("GET", self._base + "/")
        except TimeoutError as exc:
            return why_unreachable(httpx.ConnectTimeout(str(exc) or "timed out"), self._base)
        except httpx.HTTPError as exc:
            return why_unreachable(exc, self._base)
        said = status_words(response.status_code, self._endpoint.setting, response.text[:500])
        return f"{said} at {self._endpoint.display_url}" if said else None

    async def _post_json(self, path: str, form: Mapping[str, str]) -> Any:
        """The decoded ``data`` of one query; identical queries in flight at the same time are sent once.

        Checks share gates (kube-state-metrics' ``up``, the containers that restarted) and write them identically,
        so coalescing them here saves the backend the work without coupling the checks to each other. The shared
        request is shielded: one caller's deadline cancelling its wait does not cancel the others'. A request bounded by
        an answer clock is shared only with callers of the same clock (their bounds differ).
        """
        clock = _ANSWER_CLOCK.get()
        key = (path, tuple(sorted(form.items())), id(clock) if clock is not None else None)
        task = self._in_flight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._exchange(path, form))
            self._in_flight[key] = task
            task.add_done_callback(lambda done: self._forget(key, done))
        return await asyncio.shield(task)

    def _forget(self, key: _FlightKey, done: asyncio.Task[Any]) -> None:
        if self._in_flight.get(key) is done:
            del self._in_flight[key]
        if not done.cancelled():
            done.exception()  # retrieved, so that an error nobody waits for any more is not logged as lost

    async def _exchange(self, path: str, form: Mapping[str, str]) -> Any:
        try:
            return await self._exchange_once(path, form)
        except WrongApiError:
            # Asked once per source, however many queries hit the same wall at the same time.
            if self._identified is None:
                self._identified = asyncio.ensure_future(self._identify())
            raise self._error(SourceErrorKind.HTTP, await asyncio.shield(self._identified)) from None
        except SourceError as exc:
            _release_frames(exc)
            raise

    async def _identify(self) -> str:
        """What answers at this URL, when it does not know the API asked: named, so the reader fixes the right URL."""
        found = await self.what_answers(skip_own=True)
        setting = f" (check {self._endpoint.setting})" if self._endpoint.setting else ""
        url = self._endpoint.display_url
        fix = url_fix(self._endpoint.name, self._endpoint.url) or await self.cluster_fix(found)
        said = f"; {fix}" if fix else ""
        if found == "a vmselect" and vm_tenant_of(self._endpoint.url) is None:
            return f"{url} is a vmselect (a VictoriaMetrics cluster's query side) asked without a tenant{setting}{said}"
        if found:
            return f"{url} is {found}, not the {self._endpoint.name} API{setting}{said}"
        return f"{url} does not serve the {self._endpoint.name} API (HTTP 404 or unsupported path){setting}{said}"

    async def _quick(
        self, method: str, path: str, form: dict[str, str] | None = None, *, base: str | None = None
    ) -> httpx.Response | None:
        """One request of a probe, bounded by 5 s (or the query timeout if shorter); None when nothing answered."""
        try:
            async with asyncio.timeout(min(5.0, self._endpoint.timeout_seconds)):
                return await self._client.request(method, (self._base if base is None else base) + path, data=form)
        except (httpx.HTTPError, TimeoutError):
            return None

    @property
    def _server_root(self) -> str:
        """The base URL without vmselect's ``/select/<tenant>/prometheus``: where a cluster component's pages are."""
        parts = urlsplit(self._base)
        path = _TENANT_PATH.sub("", parts.path.rstrip("/"))
        return urlunsplit(parts._replace(path=path))

    async def _cluster_component(self) -> str | None:
        """The VictoriaMetrics cluster component serving this URL ("vmselect"…), from its root page; else None."""
        response = await self._quick("GET", "/", base=self._server_root)
        if response is None or response.status_code != 200:
            return None
        head = response.text[:200].lstrip()
        return next((name for name in _CLUSTER_COMPONENTS if head.startswith(name + _CLUSTER_PAGE)), None)

    async def cluster_fix(self, found: str | None, start: float | None = None, end: float | None = None) -> str | None:
        """The fix when this metrics URL is the wrong part of a VictoriaMetrics cluster (`cluster_fix`), else None.

        At a vmselect, the tenants holding data (between ``start`` and ``end``, when given) are named: with no tenant
        in the URL, to pick one; with a tenant that is not among them, as the fix itself.
        """
        if self._endpoint.name != "VictoriaMetrics":
            return None
        if found != "a vmselect":
            return cluster_fix(found, self._endpoint.url)
        tenants = await self.vm_tenants(start, end)
        tenant = vm_tenant_of(self._endpoint.url)
        if tenant is None:
            return cluster_fix(found, self._endpoint.url, tenants)
        if tenants and tenant != "multitenant" and not any(same_tenant(tenant, listed) for listed in tenants):
            during = f" in the {fmt_duration(end - start)}" if start is not None and end is not None else ""
            return (
                f"tenant {tenant} holds no data{during}: set DIGEST_VM_TENANT to one that does ({', '.join(tenants)})"
            )
        return None

    async def vm_tenants(self, start: float | None = None, end: float | None = None) -> list[str]:
        """The tenants a vmselect holds data for (``/admin/tenants``, between ``start`` and ``end``); [] if unknown."""
        window = f"?start={start:.0f}&end={end:.0f}" if start is not None and end is not None else ""
        response = await self._quick("GET", "/admin/tenants" + window, base=self._server_root)
        try:
            payload = response.json() if response is not None and response.status_code == 200 else None
        except ValueError:
            return []
        tenants = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(tenants, list):
            return []
        return [tenant for tenant in tenants if isinstance(tenant, str)][:_MAX_TENANTS_NAMED]

    async def probe(self, path: str) -> tuple[int, str]:
        """GET ``path`` once with this source's headers: the status and the start of the body (0, "" on no answer)."""
        response = await self._quick("GET", path)
        return (0, "") if response is None else (response.status_code, response.text[:_MAX_ERROR_TEXT])

    async def what_answers(self, skip_own: bool = False) -> str | None:
        """What kind of backend answers at this URL ("a VictoriaMetrics", "a Loki"…), or None when none is known.

        Cheap probes, each a known endpoint of one kind of backend: VictoriaLogs' stats query, Loki's build info, the
        Prometheus API's build info (Prometheus and Thanos report their revision and Go version; VictoriaMetrics
        reports nothing, or since 1.8x only the Prometheus version it mimics, "2.24.0"), and last the root page, where
        the parts of a VictoriaMetrics cluster say which they are ("a vmselect", "a vminsert", "a vmstorage"). With
        ``skip_own``, the probe of this source's own kind is left out (its API already failed).
        """
        probes: tuple[tuple[str, str, dict[str, str] | None, str], ...] = (
            ("POST", "/select/logsql/stats_query", {"query": "_time:1m | stats count()"}, "VictoriaLogs"),
            ("GET", "/loki/api/v1/status/buildinfo", None, "Loki"),
            ("GET", "/api/v1/status/buildinfo", None, "Prometheus"),
        )
        own = "Prometheus" if self._endpoint.name == "VictoriaMetrics" else self._endpoint.name
        for method, path, form, name in probes:
            if skip_own and name == own:
                continue
            response = await self._quick(method, path, form)
            try:
                payload = response.json() if response is not None and response.status_code == 200 else None
            except ValueError:
                continue
            if not isinstance(payload, dict):
                continue
            if name == "Prometheus" and payload.get("status") == "success":
                data = payload.get("data")
                if isinstance(data, dict) and ("revision" in data or "goVersion" in data):
                    return "a Prometheus"
                return "a vmselect" if await self._cluster_component() == "vmselect" else "a VictoriaMetrics"
            if name == "Loki" and "version" in payload:
                return "a Loki"
            if name == "VictoriaLogs" and payload.get("status") == "success":
                return "a VictoriaLogs"
        component = await self._cluster_component()
        return f"a {component}" if component else None

    async def _exchange_once(self, path: str, form: Mapping[str, str]) -> Any:
        """One question's answer: attempts while a transient failure leaves time for another, within its deadline.

        A 502, 503 or 504 (a vmselect, a gateway or a Loki querier restarting) and a connection reset mid-exchange
        are transient: asked again after a jittered backoff (0.25 s, doubling, at most 2 s) while the question's time
        allows. Whatever is still failing at the deadline is the error, with the attempts said. A refused connection
        is not retried: a backend that is down stays down for the digest's few seconds, and saying so at once is
        worth more than a wait.
        """
        async with self._gate:
            limit, said = self._time_allowed(_ANSWER_CLOCK.get())
            loop = asyncio.get_running_loop()
            deadline = loop.time() + limit
            attempt = 0
            while True:
                attempt += 1
                self.queries_sent += 1
                try:
                    return await self._attempt(path, form, deadline - loop.time(), said)
                except _TransientError as transient:
                    delay = min(_RETRY_MAX_DELAY, _RETRY_FIRST_DELAY * 2 ** (attempt - 1)) * (0.5 + random.random())  # noqa: S311  # jitter, not a secret
                    if loop.time() + delay + _RETRY_LEAST_ROOM >= deadline:
                        error = transient.error
                        if attempt > 1:
                            raise self._error(error.kind, f"{error.message} ({attempt} attempts)") from None
                        raise error from None
                    log.info("%s: %s; asking again in %.2f s", self._endpoint.name, transient.error.message, delay)
                    await asyncio.sleep(delay)

    async def _attempt(self, path: str, form: Mapping[str, str], limit: float, said: str) -> Any:
        if limit <= 0:
            raise self._error(SourceErrorKind.TIMEOUT, said)
        started = asyncio.get_running_loop().time()
        try:
            # asyncio.timeout bounds the whole exchange, httpx's timeout only each network phase.
            async with (
                asyncio.timeout(limit),
                self._client.stream("POST", self._base + path, data=dict(form)) as response,
            ):
                body = await self._read_bounded(response)
        except (TimeoutError, httpx.TimeoutException):
            raise self._error(SourceErrorKind.TIMEOUT, said) from None
        except httpx.InvalidURL:
            raise self._error(SourceErrorKind.UNREACHABLE, f"invalid URL {self._endpoint.display_url}") from None
        except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as exc:
            # The connection was there and broke mid-exchange (a reset, a proxy hanging up): worth asking again.
            raise _TransientError(
                self._error(
                    SourceErrorKind.UNREACHABLE,
                    f"connection to {self._endpoint.display_url} broken ({type(exc).__name__})",
                )
            ) from None
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        except httpx.DecodingError:
            raise self._error(SourceErrorKind.BAD_RESPONSE, "undecodable compressed body") from None
        except ExceptionGroup as group:
            # anyio's connect_tcp races addresses in a TaskGroup: a failure httpcore does not map (an
            # OverflowError from the socket layer) escapes as a group, which is still "cannot reach".
            raise self._unreachable(group.exceptions[0]) from None
        if queries_log.isEnabledFor(logging.DEBUG):
            queries_log.debug(
                "%s %s %s: HTTP %d in %.3f s, %s bytes: %s",
                self._endpoint.name,
                path,
                _window_of(form),
                response.status_code,
                asyncio.get_running_loop().time() - started,
                f"{len(body):,}",
                _shown(form.get("query", "")),
            )
        text = body.decode(response.encoding or "utf-8", errors="replace")
        if response.status_code in _RETRY_STATUSES:
            try:
                self._decode(response, text)
            except SourceError as exc:
                # A gateway's or a restarting server's bare 5xx is worth asking again; a backend that says its own
                # query timed out (Loki's 504 "deadline exceeded") would only time out again, at double the load.
                if exc.kind is not SourceErrorKind.HTTP:
                    raise
                raise _TransientError(exc) from None
        return self._decode(response, text)

    def _time_allowed(self, clock: AnswerClock | None) -> tuple[float, str]:
        """The seconds a request that just took its slot may take, and what to say if it takes them all.

        The query timeout, or less when the request's question has fewer seconds left on its clock (started here, by
        its first request). A question whose seconds ran out is not sent again.
        """
        timeout = self._endpoint.timeout_seconds
        plain = f"no answer within {timeout:g} s"
        if clock is None:
            return timeout, plain
        now = asyncio.get_running_loop().time()
        clock.start(now)
        left = clock.remaining(now)
        said = f"no answer within the {clock.seconds:g} s its question allows"
        if left <= 0:
            raise self._error(SourceErrorKind.TIMEOUT, said)
        return (left, said) if left < timeout else (timeout, plain)

    async def _read_bounded(self, response: httpx.Response) -> bytearray:
        """The body of a streamed response, at most ``max_response_bytes`` after decompression.

        Past the cap the error is raised at once; leaving the ``stream`` block then closes the connection, so the
        rest is never read. A declared Content-Length above the cap is refused before reading anything.
        """
        cap = self._endpoint.max_response_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise self._too_large()
        inflater = self._inflater(response)
        body = bytearray()
        async for chunk in response.aiter_raw():
            if inflater is None:
                if len(body) + len(chunk) > cap:
                    raise self._too_large()
                body += chunk
                continue
            try:
                inflated = inflater.inflate(chunk, cap - len(body))
            except zlib.error:
                raise self._error(SourceErrorKind.BAD_RESPONSE, "undecodable compressed body") from None
            if inflated is None:
                raise self._too_large()
            body += inflated
        return body

    def _inflater(self, response: httpx.Response) -> BoundedInflater | None:
        """The inflater the response's Content-Encoding calls for; None for an uncompressed body."""
        header = response.headers.get("content-encoding", "")
        codings = [coding.strip().lower() for coding in header.split(",") if coding.strip()]
        codings = [coding for coding in codings if coding != "identity"]
        if len(codings) > 1:
            named = ", ".join(coding[:20] for coding in codings[:4])
            raise self._error(SourceErrorKind.BAD_RESPONSE, f"response with stacked encodings ({named})")
        if not codings:
            return None
        if codings[0] not in _CODINGS:
            raise self._error(SourceErrorKind.BAD_RESPONSE, f"response with unsupported encoding {codings[0][:20]!r}")
        return BoundedInflater(codings[0])

    def _too_large(self) -> SourceError:
        cap_mib = self._endpoint.max_response_bytes / MIB
        return self._error(SourceErrorKind.BAD_RESPONSE, f"{TOO_LARGE} {cap_mib:g} MiB")

    def _decode(self, response: httpx.Response, text: str) -> Any:
        content_type = response.headers.get("content-type", "")
        if response.status_code == 404 or (
            response.status_code == 400 and ("unsupported path" in text or _NO_TENANT in text.lower())
        ):
            # Another kind of backend (VictoriaMetrics and VictoriaLogs answer 400 "unsupported path", Loki and
            # Prometheus 404), or a vmselect asked without a tenant (400 "auth error: cannot parse authToken"): not a
            # failed query, a wrong URL — `_exchange` names what answered.
            raise WrongApiError(self._endpoint.name, SourceErrorKind.HTTP, "wrong API")
        if response.status_code in (400, 422):
            raise self._error(SourceErrorKind.QUERY, f"query rejected: {_short_error(text)}")
        if response.status_code >= 300:
            said = status_words(response.status_code, self._endpoint.setting, text)
            raise self._error(
                SourceErrorKind.HTTP,
                f"{said} ({self._endpoint.display_url}){_body_hint(text)}"
                if said
                else f"HTTP {response.status_code} from {self._endpoint.display_url}{_body_hint(text)}",
            )
        try:
            payload = json.loads(text)
        except ValueError:
            what = "an HTML page" if "html" in content_type or text.lstrip().startswith("<") else "malformed JSON"
            raise self._error(SourceErrorKind.BAD_RESPONSE, f"expected JSON, got {what}") from None
        if not isinstance(payload, dict):
            raise self._error(SourceErrorKind.BAD_RESPONSE, "expected a JSON object")
        if payload.get("status") != "success":
            raise self._error(SourceErrorKind.QUERY, f"query failed: {_short_error(str(payload.get('error', '')))}")
        if payload.get("isPartial") is True:
            # vmselect marks answers missing some storage nodes; a partial count must not pass for a full one.
            raise self._error(SourceErrorKind.BAD_RESPONSE, "partial response (some storage nodes did not answer)")
        if self.refuses_warnings:
            warning = partial_warning(payload.get("warnings"))
            if warning is not None:
                raise self._error(SourceErrorKind.BAD_RESPONSE, f"partial response ({_short_error(warning)})")
        return payload.get("data")

    def _vector(self, data: Any) -> list[Sample]:
        return [Sample(labels, value) for labels, value in self._vector_rows(data)]

    def _vector_rows(self, data: Any) -> list[tuple[dict[str, str], float]]:
        """An instant vector's rows as (labels, value) pairs, NaN rows left out; `SourceError` for a bad answer."""
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            raise self._error(SourceErrorKind.BAD_RESPONSE, "expected an instant vector")
        result = data.get("result")
        if not isinstance(result, list):
            raise self._error(SourceErrorKind.BAD_RESPONSE, "result is not a list of series")
        samples: list[tuple[dict[str, str], float]] = []
        # The fast path trusts nothing either: any surprise in a row sends it through the checking path below, which
        # raises the precise error. Answers of thousands of rows (one per pod) make this loop the client's hot spot.
        append = samples.append
        for item in result:
            try:
                metric = item["metric"]  # absent (an aggregate over everything): the checking path gives {}
                pair = item["value"]
                if type(metric) is not dict or type(pair) is not list or len(pair) != 2:
                    raise TypeError
                value = float(pair[1])
                # str.join refuses any value that is not a string, at C speed: the check costs no Python loop.
                "".join(metric.values())
            except (KeyError, TypeError, ValueError):
                if not isinstance(item, dict):
                    raise self._error(SourceErrorKind.BAD_RESPONSE, "result is not a list of series") from None
                value = parse_value(item.get("value"), self)
                metric = _labels(item, self)
            if not math.isnan(value):  # NaN (a division by zero in the query) is no sample
                append((metric, value))
        return samples

    def _matrix(self, data: Any) -> list[RangeSeries]:
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise self._error(SourceErrorKind.BAD_RESPONSE, "expected a range matrix")
        result: list[RangeSeries] = []
        for item in _result_list(data, self):
            raw_values = item.get("values")
            if not isinstance(raw_values, list):
                raise self._error(SourceErrorKind.BAD_RESPONSE, "range series without values")
            try:
                # The fast path: [[time, "value"], …] as every backend writes it; any surprise (a pair that is not a
                # two-item list, a value that is no number) takes the checking path, which raises the precise error.
                if not all(type(pair) is list for pair in raw_values):
                    raise TypeError
                points = [(float(moment), float(value)) for moment, value in raw_values]
            except (TypeError, ValueError):
                points = [(_parse_timestamp(pair, self), parse_value(pair, self)) for pair in raw_values]
            result.append(RangeSeries(labels=_labels(item, self), points=points))
        return result


class _TransientError(Exception):
    """A failure worth asking again (a 502/503/504, a connection broken mid-exchange), wrapping its `SourceError`."""

    def __init__(self, error: SourceError) -> None:
        super().__init__(error.message)
        self.error = error


# Statuses a proxy or a restarting backend answers for a moment; the backoff between attempts (jittered ×0.5–1.5).
_RETRY_STATUSES = frozenset({502, 503, 504})
_RETRY_FIRST_DELAY = 0.25
_RETRY_MAX_DELAY = 2.0
# An attempt is only worth making with at least this much of the deadline left.
_RETRY_LEAST_ROOM = 0.5


class WrongApiError(SourceError):
    """The backend does not know the path asked: it is not the API this source speaks."""


# The codings httpx asks for (its default Accept-Encoding) and zlib inflates; "x-gzip" is gzip's old name.
_CODINGS = frozenset({"gzip", "x-gzip", "deflate"})


class BoundedInflater:
    """One ``gzip`` or ``deflate`` body, inflated chunk by chunk without ever producing more than asked for."""

    def __init__(self, coding: str) -> None:
        self._deflate = coding == "deflate"
        # "deflate" is meant to be zlib-wrapped, but servers send raw deflate too: the first chunk tells (as httpx).
        self._undecided = self._deflate
        self._object = zlib.decompressobj(zlib.MAX_WBITS if self._deflate else zlib.MAX_WBITS | 16)

    def inflate(self, chunk: bytes, room: int) -> bytes | None:
        """``chunk`` inflated, or None as soon as it would exceed ``room`` bytes; raises `zlib.error` if corrupt."""
        if self._undecided:
            self._undecided = False
            try:
                return self._bounded(chunk, room)
            except zlib.error:
                self._object = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._bounded(chunk, room)

    def _bounded(self, chunk: bytes, room: int) -> bytes | None:
        out = bytearray()
        data = chunk
        while data:
            # At most one byte past the room: enough to know the cap is exceeded, never a whole bomb's worth.
            piece = self._object.decompress(data, room - len(out) + 1)
            out += piece
            if len(out) > room:
                return None
            data = self._object.unconsumed_tail
            if not piece and data:  # no progress (cannot happen with a positive max_length); never spin
                break
        return bytes(out)


def _release_frames(error: BaseException) -> None:
    """Free the locals of the finished frames an error (and the errors it was raised from) carries.

    Those frames hold the body read so far, up to ``max_response_bytes``; an error kept by a check, or merely waiting
    in a reference cycle for the garbage collector, would keep that body alive too, once per failed query.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__


def _body_hint(text: str) -> str:
    """A short reason from an error body, if the body is short plain text (never an HTML page)."""
    stripped = text.strip()
    if not stripped or stripped.startswith("<") or len(stripped) > _MAX_ERROR_TEXT:
        return ""
    return f": {stripped.splitlines()[0]}"


# Prometheus' last line when it answers with fewer of PromQL's notes than it made.
_OMITTED_NOTES = re.compile(r"\d+ more annotations omitted")


def partial_warning(warnings: object) -> str | None:
    """The first of an answer's ``warnings`` that says data may be missing; None when there is none.

    Prometheus answers a query whose remote read failed with its local data and the failure as a warning
    ("remote_read: error sending request: …", measured on 2.42), and Thanos a query that a store could not serve
    with the other stores' series and a warning: a plain success, short. PromQL's own notes in newer versions
    ("PromQL warning: …", "PromQL info: …": a counter not named ``_total``, histograms mixed with floats), and the
    line that counts those left out ("12 more annotations omitted"), are about the query, not the data, and pass.
    """
    if not isinstance(warnings, list):
        return None
    for warning in warnings:
        text = str(warning)
        if not text.startswith("PromQL ") and _OMITTED_NOTES.fullmatch(text) is None:
            return text
    return None


def _short_error(text: str) -> str:
    line = " ".join(text.split())
    if line.startswith("<"):
        return "an HTML page"
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        line = " ".join(parsed["error"].split())
    line = _ECHOED_QUERY.sub("query=(the query sent)", line)
    return line[:_MAX_REASON_TEXT] or "no reason given"


def result_labels_and_text(data: Any, source: HttpSource) -> list[tuple[dict[str, str], str]]:
    """The rows of an instant vector whose values are text (VictoriaLogs' ``min(_msg)``, ``max(_time)``), unparsed."""
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise source._error(SourceErrorKind.BAD_RESPONSE, "expected an instant vector")
    rows: list[tuple[dict[str, str], str]] = []
    for item in _result_list(data, source):
        pair = item.get("value")
        if not isinstance(pair, list) or len(pair) != 2:
            raise source._error(SourceErrorKind.BAD_RESPONSE, "sample is not a [time, value] pair")
        rows.append((_labels(item, source), str(pair[1])))
    return rows


def _result_list(data: Mapping[str, Any], source: HttpSource) -> list[Mapping[str, Any]]:
    result = data.get("result")
    if not isinstance(result, list) or not all(isinstance(item, dict) for item in result):
        raise source._error(SourceErrorKind.BAD_RESPONSE, "result is not a list of series")
    return result


def _labels(item: Mapping[str, Any], source: HttpSource) -> dict[str, str]:
    metric = item.get("metric", {})
    if not isinstance(metric, dict):
        raise source._error(SourceErrorKind.BAD_RESPONSE, "series labels are not an object")
    return {str(key): str(value) for key, value in metric.items()}


def parse_value(pair: Any, source: HttpSource) -> float:
    """The number of a ``[time, value]`` pair; `SourceError` (BAD_RESPONSE) for anything else."""
    if not isinstance(pair, list) or len(pair) != 2:
        raise source._error(SourceErrorKind.BAD_RESPONSE, "sample is not a [time, value] pair")
    try:
        return float(pair[1])
    except (TypeError, ValueError):
        raise source._error(
            SourceErrorKind.BAD_RESPONSE, f"sample value {str(pair[1])[:40]!r} is not a number"
        ) from None


def _parse_timestamp(pair: Any, source: HttpSource) -> float:
    if not isinstance(pair, list) or len(pair) != 2:
        raise source._error(SourceErrorKind.BAD_RESPONSE, "sample is not a [time, value] pair")
    try:
        return float(pair[0])
    except (TypeError, ValueError):
        raise source._error(SourceErrorKind.BAD_RESPONSE, "sample time is not a number") from None
