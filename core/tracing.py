"""Traces through OpenTelemetry: one trace follows a task across every Kafka hop (docs/tracing.md).

Off unless OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set when a role
starts (`start`): then the process installs an SDK tracer provider named `wakeful-<role>` (or
OTEL_SERVICE_NAME) whose batch processor exports over OTLP/HTTP, flushed by `shutdown`. Off, every
call here is one test of a module global: OpenTelemetry is not even imported (the spans live in
core/trace_spans.py, loaded by `start`), and no header is read or written.

The seams: the handling of each consumed message runs inside `handling()` (a CONSUMER span whose
parent is the message's traceparent, consumers/kafka/handling.py), and every message produced while it
runs carries the current context in its headers (`inject`, consumers/kafka/producing.py). A produced
message gets no span of its own: the next hop's span is a child of the span that produced it.
Handlers stamp what they know with `stamp()` / `stamp_task()`; a tool's call is a span of its own
(`tool_call`). Header parsing is core/trace_headers.py.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from wakeful.core import trace_headers
from wakeful.core.errors import ConfigError
from wakeful.core.trace_headers import Consumed, Task

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing starts
    from opentelemetry.sdk.trace.export import SpanExporter

    from wakeful.core.trace_spans import Spans

P = ParamSpec("P")
R = TypeVar("R")
# OpenTelemetry is the `tracing` extra: redis-py imports its SDK whenever it is installed, which
# costs every process tens of milliseconds at start, traced or not (D75).
MISSING = "tracing needs OpenTelemetry ({missing} is not installed): pip install 'wakeful[tracing]'"
OUTBOX_FIELD = "tp"  # an outbox entry's traceparent (state/last_step.py), for the relay's span

_spans: Spans | None = None
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
    global _spans  # noqa: PLW0603  # the process's one provider, set at its start and its end
    env = os.environ if env is None else env
    if _spans is not None or (exporter is None and not configured(env)):
        return _spans is not None
    try:
        from wakeful.core import trace_spans

        made = exporter or trace_spans.exporter_for(endpoint(env))
    except ImportError as exc:  # the `tracing` extra is not installed
        raise ConfigError("OTEL_EXPORTER_OTLP_ENDPOINT", MISSING.format(missing=exc.name)) from exc
    service = env.get("OTEL_SERVICE_NAME") or f"wakeful-{role}"
    _spans = trace_spans.Spans(role, service, made)
    return True


def shutdown() -> None:
    """Export what is still batched and stop: at the end of a role's process."""
    global _spans  # the process's one provider, set at its start and its end
    spans, _spans = _spans, None
    if spans is not None:
        spans.shutdown()


@contextlib.contextmanager
def started(role: str, env: Mapping[str, str] | None = None) -> Iterator[bool]:
    """start() for the life of a role's process, shutdown() (the last export) at its end."""
    try:
        yield start(role, env)
    finally:
        shutdown()


def on() -> bool:
    return _spans is not None


def handling(role: str, msg: Consumed) -> AbstractContextManager[Any]:
    """The CONSUMER span `wakeful.<role> handle` around one handling of `msg`, the child of the
    context its headers carry (a new root if they carry none, or a malformed one). Current in the
    thread that enters it: run the handler inside."""
    return _NULL if _spans is None else _spans.handling(role, msg)


def root(name: str, **attributes: str | int | None) -> AbstractContextManager[Any]:
    """A PRODUCER span that starts a new trace (the timer's wake of a task from its deadline)."""
    return _NULL if _spans is None else _spans.root(name, _attributes(attributes))


def server(name: str, headers: Mapping[str, str]) -> AbstractContextManager[Any]:
    """A SERVER span for one HTTP request, the child of its `traceparent` header (a new root if it
    has none or a malformed one). For the HTTP ingress: open it around the request's handling, and
    pass `inject(headers)` (or `kafka_headers()`) with the message it publishes."""
    return _NULL if _spans is None else _spans.server(name, headers)


def publishing(
    name: str, tasks: Sequence[tuple[str, bytes]], **attributes: str | int | None
) -> AbstractContextManager[Any]:
    """For one message that carries the work of several tasks (the relay's batch of records), a
    PRODUCER span in each task's trace, the child of its (task id, traceparent); the first is the
    current span while the message is sent."""
    return _NULL if _spans is None else _spans.publishing(name, tasks, _attributes(attributes))


def _attributes(fields: Mapping[str, str | int | bool | None]) -> dict[str, str | int | bool]:
    return {f"wakeful.{k}": v for k, v in fields.items() if v is not None}


def stamp(**fields: str | int | bool | None) -> None:
    """Set `wakeful.<name>` attributes on the current span (None values are skipped): the task id,
    version, app, workflow, policy and tool-catalog versions as far as the handler knows them."""
    if _spans is not None:
        from wakeful.core import trace_spans

        trace_spans.stamp(_attributes(fields))


def stamp_task(cp: Task, app: str | None = None) -> None:
    """stamp() with what a checkpoint says: the task, its versions and stamps, and its stage."""
    if _spans is None:
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
    if _spans is None:
        return []
    from wakeful.core import trace_spans

    return trace_spans.current_headers()


def inject(headers: Any) -> Any:
    """`headers` (None, a list of pairs or a mapping) with the current context added; unchanged
    when tracing is off, no span is current, or the caller set a traceparent of its own."""
    if _spans is None:
        return headers
    return trace_headers.with_headers(headers, kafka_headers())


def carried(headers: Any) -> Any:
    """inject() for a publisher outside the roles (producers/publish.py): the current span of
    whatever tracer provider the process installed, wakeful's or the upstream system's own."""
    if "opentelemetry.trace" not in sys.modules:  # nothing in this process traces
        return headers
    from wakeful.core import trace_spans

    return trace_headers.with_headers(headers, trace_spans.current_headers())


def outbox_field() -> tuple[str, ...]:
    """The field an outbox entry carries the current context in (OUTBOX_FIELD), or nothing."""
    if _spans is None:
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
        if _spans is None:
            return call(*args, **kwargs)
        from wakeful.core import trace_spans

        with _spans.tool(str(getattr(args[0], "name", "tool")) if args else "tool") as span:
            result = call(*args, **kwargs)
            trace_spans.outcome(span, outcome_of(result), result)
            return result

    return traced
