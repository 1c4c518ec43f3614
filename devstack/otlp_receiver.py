"""An OTLP/HTTP trace receiver in this process: what the tests and `wakeful bench --tracing` export to.

It accepts POST /v1/traces with a protobuf ExportTraceServiceRequest (gzip or not), as the
roles' OTLP/HTTP exporter sends it, and keeps each span as a `Received` record, so a test can ask
for one trace's spans and a benchmark pays for a real export. Not a collector: nothing is
forwarded, and it keeps at most `keep` spans (then counts the rest).
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

PATH = "/v1/traces"
MAX_BODY = 64 * 1024 * 1024
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class Received:
    """One exported span, its ids as lower-case hex (the parent "" for a root)."""

    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    links: tuple[str, ...] = ()  # the trace ids it links to
    error: bool = False


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    return None if which is None else getattr(v, which)


def _attributes(kvs: Any) -> dict[str, Any]:
    pairs: list[KeyValue] = list(kvs)
    return {kv.key: _value(kv.value) for kv in pairs}


def decode(body: bytes) -> list[Received]:
    """The spans of one ExportTraceServiceRequest."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        service = str(_attributes(resource_spans.resource.attributes).get("service.name", ""))
        for scope in resource_spans.scope_spans:
            for s in scope.spans:
                spans.append(
                    Received(
                        service=service,
                        name=s.name,
                        kind=KINDS.get(s.kind, str(s.kind)),
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        attributes=_attributes(s.attributes),
                        links=tuple(link.trace_id.hex() for link in s.links),
                        error=s.status.code == 2,
                    )
                )
    return spans


@dataclass
class Receiver:
    """Serves on 127.0.0.1 (a free port unless one is given) from start() until stop()."""

    port: int = 0
    keep: int = 200_000
    spans: list[Received] = field(default_factory=list)
    dropped: int = 0  # spans past `keep`
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        """The base URL to set as OTEL_EXPORTER_OTLP_ENDPOINT (the exporter adds /v1/traces)."""
        assert self._server is not None, "start() the receiver first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Receiver:
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self._take))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _take(self, spans: list[Received]) -> None:
        with self._lock:
            self.requests += 1
            room = max(0, self.keep - len(self.spans))
            self.spans += spans[:room]
            self.dropped += len(spans) - min(room, len(spans))

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.spans)

    def count(self) -> int:
        with self._lock:
            return len(self.spans) + self.dropped

    def trace(self, trace_id: str) -> list[Received]:
        return [s for s in self.snapshot() if s.trace_id == trace_id]

    def having(self, key: str, value: Any) -> list[Received]:
        """The spans whose attribute `key` is `value`."""
        return [s for s in self.snapshot() if s.attributes.get(key) == value]


def _handler(take: Callable[[list[Received]], None]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.split("?")[0] != PATH:
                return self._answer(404, b"")
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 <= length <= MAX_BODY:
                return self._answer(413, b"")
            body = self.rfile.read(length)
            try:
                if self.headers.get("Content-Encoding", "").lower() == "gzip":
                    body = gzip.decompress(body)
                spans = decode(body)
            except Exception:  # an undecodable export is the sender's problem: say so, keep serving
                return self._answer(400, b"")
            take(spans)
            return self._answer(200, ExportTraceServiceResponse().SerializeToString())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # the base class's name
            return  # quiet: a test's output is its own

    return Handler
