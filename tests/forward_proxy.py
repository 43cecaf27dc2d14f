"""A forward HTTP proxy on loopback that records what passes: what a cluster's egress proxy is to the bot."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tests.loopback import serving
from tests.misbehaving_server import QuietHandler

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


@dataclass
class Proxied:
    """The proxy's URL and the absolute URLs it was asked for."""

    url: str
    targets: list[str] = field(default_factory=list)


@contextmanager
def forward_proxy() -> Iterator[Proxied]:
    """Serve a forward proxy (plain http, absolute-form requests) on 127.0.0.1 until the block ends."""
    proxied = Proxied(url="")

    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"

        def reply(self) -> None:
            proxied.targets.append(self.path)
            target = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {key: value for key, value in self.headers.items() if key.lower() not in _HOP_BY_HOP}
            connection = http.client.HTTPConnection(target.hostname or "", target.port or 80, timeout=60)
            try:
                path = target.path + (f"?{target.query}" if target.query else "")
                connection.request(self.command, path, body=body, headers=headers)
                answer = connection.getresponse()
                payload = answer.read()
            finally:
                connection.close()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    with serving(Handler) as url:
        proxied.url = url
        yield proxied
