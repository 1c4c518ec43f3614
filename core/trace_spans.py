"""The spans themselves, on the OpenTelemetry API and SDK: imported only once tracing is on
(core/tracing.py is the face every role calls, and stays free of OpenTelemetry until then).

One `Spans` per process: its SDK tracer provider (a batch processor exporting over OTLP/HTTP) and
the tracer the roles' spans come from. A remote parent is rebuilt from a parsed traceparent
(core/trace_headers.py) into a fresh context, never the caller's: a span with no parent is a root.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from wakeful.core import trace_headers
from wakeful.core.log import Log
from wakeful.core.trace_headers import TRACEPARENT, TRACESTATE, Consumed, Parent

Attributes = Mapping[str, str | int | bool]


class Spans:
    """The process's tracer provider, exporting through `exporter`, named after `service`."""

    def __init__(self, role: str, service: str, exporter: SpanExporter) -> None:
        _route_sdk_lines(role)
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service, "wakeful.role": role})
        )
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        if type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider":  # the API allows one, once
            trace.set_tracer_provider(self.provider)  # an app's tools may open spans of their own under ours
        self.tracer = self.provider.get_tracer("wakeful")

    def shutdown(self) -> None:
        self.provider.shutdown()

    def handling(self, role: str, msg: Consumed) -> AbstractContextManager[Span]:
        try:
            headers = msg.headers()
        except Exception:  # a message that cannot show its headers still gets handled
            headers = None
        attributes: dict[str, str | int] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.destination.name": msg.topic() or "",
            "messaging.destination.partition.id": str(msg.partition()),
            "messaging.kafka.offset": msg.offset() or 0,
        }
        return self.tracer.start_as_current_span(
            f"wakeful.{role} handle",
            context=_context(trace_headers.parent_of(headers)),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
        )

    def root(self, name: str, attributes: Attributes) -> AbstractContextManager[Span]:
        return self.tracer.start_as_current_span(
            name, context=Context(), kind=SpanKind.PRODUCER, attributes=attributes
        )

    def server(self, name: str, headers: Mapping[str, str]) -> AbstractContextManager[Span]:
        return self.tracer.start_as_current_span(
            name, context=_context(trace_headers.parent_of(headers)), kind=SpanKind.SERVER
        )

    @contextlib.contextmanager
    def publishing(
        self, name: str, tasks: Sequence[tuple[str, bytes]], attributes: Attributes
    ) -> Iterator[Span]:
        """One PRODUCER span per task whose traceparent parses, each in its task's trace; the first
        is current while the message is sent (its headers name it). With none, one new root."""
        found = [(t, p) for t, raw in tasks if (p := trace_headers.parse_traceparent(raw)) is not None]
        spans = [
            self.tracer.start_span(name, _context(p), SpanKind.PRODUCER, {**attributes, "wakeful.task_id": t})
            for t, p in found
        ] or [self.tracer.start_span(name, Context(), SpanKind.PRODUCER, attributes)]
        try:
            with trace.use_span(spans[0], end_on_exit=False):
                yield spans[0]
        finally:
            for span in spans:
                span.end()

    def tool(self, name: str) -> AbstractContextManager[Span]:
        return self.tracer.start_as_current_span(f"wakeful.tool {name}", attributes={"wakeful.tool": name})


def stamp(attributes: Attributes) -> None:
    trace.get_current_span().set_attributes(attributes)


def outcome(span: Span, said: str, result: object) -> None:
    span.set_attribute("wakeful.tool.outcome", said)
    if said == "failed":
        span.set_status(Status(StatusCode.ERROR, str(result)[:300]))


def current_headers() -> list[tuple[str, bytes]]:
    """The current span's context (whatever provider made it) as Kafka headers; none if no span."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return []
    parent = trace_headers.format_traceparent(context.trace_id, context.span_id, context.trace_flags)
    headers = [(TRACEPARENT, parent.encode())]
    state = context.trace_state.to_header() if context.trace_state else ""
    if state:
        headers.append((TRACESTATE, state.encode()))
    return headers


def _context(parent: Parent | None) -> Context:
    """A fresh context whose current span is `parent` (remote), or an empty one: a new root."""
    if parent is None:
        return Context()
    state = TraceState(list(parent.tracestate)) if parent.tracestate else None
    remote = SpanContext(parent.trace_id, parent.span_id, True, TraceFlags(parent.flags), state)
    return trace.set_span_in_context(NonRecordingSpan(remote), Context())


def _span_context(parent: Parent) -> SpanContext:
    return SpanContext(parent.trace_id, parent.span_id, True, TraceFlags(parent.flags))


class _SdkLines(logging.Handler):
    """The SDK's own warnings (an export that failed, a queue that overflowed) as `tracing.log`
    records, in the role's JSON log rather than as bare text on stderr."""

    def __init__(self, role: str) -> None:
        super().__init__(logging.WARNING)
        self._log = Log(role=role)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._log(
                "tracing.log",
                level=record.levelname.lower(),
                facility=record.name,
                message=record.getMessage(),
            )
        except Exception:  # a line that cannot be written must not break an export
            self.handleError(record)


def _route_sdk_lines(role: str) -> None:
    sdk = logging.getLogger("opentelemetry")
    if not any(isinstance(h, _SdkLines) for h in sdk.handlers):
        sdk.addHandler(_SdkLines(role))
        sdk.propagate = False


def exporter_for(endpoint: str) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint)
