"""Traces through OpenTelemetry: one trace follows a task across every Kafka hop (docs/tracing.md).

Off unless OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set when a role
starts (`start`): then the process installs an SDK tracer provider named `wakeful-<role>` (or
OTEL_SERVICE_NAME) whose batch processor exports over OTLP/HTTP, flushed by `shutdown`. Off, every
call here is one test of a module global: no SDK is imported, no header is read or written.

The seams: the handling of each consumed message runs inside `handling()` (a CONSUMER span whose
parent is the message's traceparent, consumers/handling.py), and every message produced while it
runs carries the current context in its headers (`inject`, consumers/producing.py). A produced
message gets no span of its own: the next hop's span is a child of the span that produced it.
Handlers stamp what they know with `stamp()` / `stamp_task()`; a tool's call is a span of its own
(`tool_call`). Header parsing is core/trace_headers.py.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TraceState,
)

from wakeful.core import trace_headers
from wakeful.core.log import Log
from wakeful.core.trace_headers import TRACEPARENT, TRACESTATE, Consumed, Parent, Task

if TYPE_CHECKING:  # the SDK is imported only when tracing starts
    from opentelemetry.sdk.trace.export import SpanExporter

P = ParamSpec("P")
R = TypeVar("R")
OUTBOX_FIELD = "tp"  # an outbox entry's traceparent (state/last_step.py), for the relay's span

_tracer: Tracer | None = None
_provider: Any = None  # the SDK's TracerProvider, once started
_NULL: AbstractContextManager[None] = contextlib.nullcontext()


def configured(env: Mapping[str, str]) -> bool:
    """Whether `env` asks for traces to be exported."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def endpoint(env: Mapping[str, str]) -> str:
    """Where spans go: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else OTEL_EXPORTER_OTLP_ENDPOINT
    with the signal's path (/v1/traces) added, as the OTLP exporter specification says."""
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    return env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip().rstrip("/") + "/v1/traces"


def start(role: str, env: Mapping[str, str] | None = None, *, exporter: SpanExporter | None = None) -> bool:
    """Install the exporting tracer provider for this role's process if `env` (default: the
    process's) names an OTLP endpoint, or an `exporter` is given; True if tracing is on. The
    exporter reads the other OTEL_EXPORTER_OTLP_* settings itself (headers, timeout, compression),
    the batch processor the OTEL_BSP_* ones, the sampler OTEL_TRACES_SAMPLER."""
    global _tracer, _provider
    env = os.environ if env is None else env
    if _tracer is not None or (exporter is None and not configured(env)):
        return _tracer is not None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint(env))
    _route_sdk_lines(role)
    name = env.get("OTEL_SERVICE_NAME") or f"wakeful-{role}"
    provider = TracerProvider(resource=Resource.create({"service.name": name, "wakeful.role": role}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    if _provider_unset():  # an app's tools may open spans of their own under ours
        trace.set_tracer_provider(provider)
    _provider, _tracer = provider, provider.get_tracer("wakeful")
    return True


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


def _provider_unset() -> bool:
    """Whether no SDK provider was installed in this process yet (the API allows one, once)."""
    return type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"


def shutdown() -> None:
    """Export what is still batched and stop: at the end of a role's process."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()


def on() -> bool:
    return _tracer is not None


def _context(parent: Parent | None) -> Context:
    """A fresh context whose current span is `parent` (remote), or an empty one: a new root."""
    if parent is None:
        return Context()
    state = TraceState(list(parent.tracestate)) if parent.tracestate else None
    remote = SpanContext(parent.trace_id, parent.span_id, True, TraceFlags(parent.flags), state)
    return trace.set_span_in_context(NonRecordingSpan(remote), Context())


def handling(role: str, msg: Consumed) -> AbstractContextManager[Any]:
    """The CONSUMER span `wakeful.<role> handle` around one handling of `msg`, the child of the
    context its headers carry (a new root if they carry none, or a malformed one). Current in the
    thread that enters it: run the handler inside."""
    if _tracer is None:
        return _NULL
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
    return _tracer.start_as_current_span(
        f"wakeful.{role} handle",
        context=_context(trace_headers.parent_of(headers)),
        kind=SpanKind.CONSUMER,
        attributes=attributes,
    )


def root(name: str, **attributes: str | int | None) -> AbstractContextManager[Any]:
    """A span that starts a new trace (the timer's wake of a task from its deadline)."""
    if _tracer is None:
        return _NULL
    return _tracer.start_as_current_span(
        name, context=Context(), kind=SpanKind.PRODUCER, attributes=_attributes(attributes)
    )


def server(name: str, headers: Mapping[str, str]) -> AbstractContextManager[Any]:
    """A SERVER span for one HTTP request, the child of its `traceparent` header (a new root if it
    has none or a malformed one). For the HTTP ingress: open it around the request's handling, and
    pass `kafka_headers()` with the message it publishes."""
    if _tracer is None:
        return _NULL
    return _tracer.start_as_current_span(
        name, context=_context(trace_headers.parent_of(headers)), kind=SpanKind.SERVER
    )


def publishing(
    name: str, parents: Sequence[bytes], **attributes: str | int | None
) -> AbstractContextManager[Any]:
    """A PRODUCER span for one message that carries the work of several traces (the relay's
    batch of records): the child of the first good traceparent, linked to the others."""
    if _tracer is None:
        return _NULL
    found = [p for raw in parents if (p := trace_headers.parse_traceparent(raw)) is not None]
    links = [Link(_span_context(p)) for p in found[1:]]
    first = found[0] if found else None
    return _tracer.start_as_current_span(
        name, context=_context(first), kind=SpanKind.PRODUCER, links=links, attributes=_attributes(attributes)
    )


def _span_context(parent: Parent) -> SpanContext:
    return SpanContext(parent.trace_id, parent.span_id, True, TraceFlags(parent.flags))


def _attributes(fields: Mapping[str, str | int | bool | None]) -> dict[str, str | int | bool]:
    return {f"wakeful.{k}": v for k, v in fields.items() if v is not None}


def stamp(**fields: str | int | bool | None) -> None:
    """Set `wakeful.<name>` attributes on the current span (None values are skipped): the task id,
    version, app, workflow, policy and tool-catalog versions as far as the handler knows them."""
    if _tracer is None:
        return
    trace.get_current_span().set_attributes(_attributes(fields))


def stamp_task(cp: Task, app: str | None = None) -> None:
    """stamp() with what a checkpoint says: the task, its versions and stamps, and its stage."""
    if _tracer is None:
        return
    business, versions = cp.business, cp.versions
    stamp(
        task_id=cp.task_id,
        task_version=business.version,
        state_version=versions.state_version,
        stage=cp.stage,
        app=app,
        workflow=business.workflow,
        workflow_version=business.workflow_version,
        policy_version=versions.policy,
        tool_catalog_version=versions.tool_catalog,
    )


def kafka_headers() -> list[tuple[str, bytes]]:
    """The current span's context as Kafka headers (traceparent, and tracestate if any); none when
    tracing is off or no span is current."""
    return [] if _tracer is None else _current()


def carried(headers: Any) -> Any:
    """inject() for a publisher outside the roles (producers/publish.py): the current span of
    whatever tracer provider the process installed, wakeful's or the upstream system's own."""
    return trace_headers.with_headers(headers, _current())


def _current() -> list[tuple[str, bytes]]:
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return []
    parent = trace_headers.format_traceparent(context.trace_id, context.span_id, context.trace_flags)
    headers = [(TRACEPARENT, parent.encode())]
    state = context.trace_state.to_header() if context.trace_state else ""
    if state:
        headers.append((TRACESTATE, state.encode()))
    return headers


def inject(headers: Any) -> Any:
    """`headers` (None, a list of pairs or a mapping) with the current context added; unchanged
    when tracing is off, no span is current, or the caller set a traceparent of its own."""
    if _tracer is None:
        return headers
    return trace_headers.with_headers(headers, kafka_headers())


def outbox_field() -> tuple[str, ...]:
    """The field an outbox entry carries the current context in (OUTBOX_FIELD), or nothing."""
    if _tracer is None:
        return ()
    found = kafka_headers()
    return (OUTBOX_FIELD, found[0][1].decode()) if found else ()


def outcome_of(result: object) -> str:
    """What a tool call's result says of it: succeeded, pending (an answer later), failed (a reason
    given: refused for good), or the name of what came back instead (unavailable)."""
    if isinstance(result, Mapping):
        return "pending" if "wakeful.pending" in result else "succeeded"
    if isinstance(result, str):
        return "failed"
    return type(result).__name__.lower()


def tool_call(call: Callable[P, R]) -> Callable[P, R]:
    """Run a tool's call (its first argument names the tool) inside a span `wakeful.tool <name>`
    that says its outcome (`wakeful.tool.outcome`); an exception is recorded on the span."""

    @functools.wraps(call)
    def traced(*args: P.args, **kwargs: P.kwargs) -> R:
        if _tracer is None:
            return call(*args, **kwargs)
        tool = str(getattr(args[0], "name", "tool")) if args else "tool"
        with _tracer.start_as_current_span(f"wakeful.tool {tool}", attributes={"wakeful.tool": tool}) as span:
            result = call(*args, **kwargs)
            outcome = outcome_of(result)
            span.set_attribute("wakeful.tool.outcome", outcome)
            if outcome == "failed":
                span.set_status(Status(StatusCode.ERROR, str(result)[:300]))
            return result

    return traced


@contextlib.contextmanager
def started(role: str, env: Mapping[str, str] | None = None) -> Iterator[bool]:
    """start() for the life of a role's process, shutdown() (the last export) at its end."""
    try:
        yield start(role, env)
    finally:
        shutdown()
