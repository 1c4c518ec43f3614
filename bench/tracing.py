"""`wakeful bench --tracing`: the fleet exports every span over OTLP/HTTP to a receiver the bench
runs in its own process (devstack/otlp_receiver.py), so the roles pay for a real export; without
the option the roles run with tracing off, whatever OTEL_* settings the shell has (D75)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from wakeful.core import tracing
from wakeful.core.errors import ConfigError

if TYPE_CHECKING:  # OpenTelemetry is an extra: imported only for a run that traces
    from wakeful.devstack.otlp_receiver import Receiver

# The settings that turn tracing on in a role (core/tracing.configured): dropped for a run without it.
SWITCHES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def receiver(on: bool) -> Receiver | None:
    """A started receiver for a run with tracing, else None."""
    if not on:
        return None
    try:
        from wakeful.devstack.otlp_receiver import Receiver
    except ImportError as exc:
        raise ConfigError("--tracing", tracing.MISSING.format(missing=exc.name)) from exc
    return Receiver(keep=0).start()  # counts spans, keeps none: a long run stays small


def env(base: Mapping[str, str], found: Receiver | None) -> dict[str, str]:
    """The roles' environment: exporting to `found`, or with tracing off."""
    out = {k: v for k, v in base.items() if k not in SWITCHES}
    if found is not None:
        out["OTEL_EXPORTER_OTLP_ENDPOINT"] = found.endpoint
        out.pop("OTEL_SDK_DISABLED", None)
    return out


def figures(found: Receiver | None, done: int) -> dict[str, Any] | None:
    """What was exported (read once the fleet has stopped: its last batches are flushed then)."""
    if found is None:
        return None
    spans = found.count()
    found.stop()
    return {"spans": spans, "spans_per_task": round(spans / max(1, done), 2), "exports": found.requests}


class _Consumed:
    """A consumed message as the runner hands it over, with a parent in its headers."""

    headers_: ClassVar[list[tuple[str, bytes]]] = [
        ("wakeful-kid", b"gate-1"),
        ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    ]

    def topic(self) -> str:
        return "wakeful.wake"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 0

    def headers(self) -> Any:
        return self.headers_


def _one(msg: _Consumed) -> None:
    """What a role adds to one message: its span, the stamp, one produce's headers."""
    with tracing.handling("gate", msg):
        tracing.stamp(task_id="t-1", task_version=1, app="refund", workflow="refund", policy_version="p")
        tracing.inject([("wakeful-kid", b"gate-1")])


def per_message_us(rounds: int = 2000) -> dict[str, float]:
    """CPU µs one handled message costs in process: tracing off; on (a span, a stamp, an inject);
    and the OTLP encoding of its span for export. Measured in this process, not in the fleet's;
    {} where OpenTelemetry is not installed (the `tracing` extra)."""
    try:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        return {}

    msg, was_on = _Consumed(), tracing.on()
    if was_on:  # never measure over a provider something else installed
        return {}
    start = time.process_time()
    for _ in range(rounds):
        _one(msg)
    off = time.process_time() - start
    kept = InMemorySpanExporter()
    tracing.start("bench", {}, exporter=kept)
    try:
        start = time.process_time()
        for _ in range(rounds):
            _one(msg)
        on = time.process_time() - start
    finally:
        tracing.shutdown()  # exports what is batched to `kept`
    spans = kept.get_finished_spans()
    start = time.process_time()
    for i in range(0, len(spans), 512):
        encode_spans(spans[i : i + 512]).SerializeToString()
    encode = time.process_time() - start
    return {
        "off": round(off * 1e6 / rounds, 2),
        "on": round(on * 1e6 / rounds, 1),
        "encode": round(encode * 1e6 / max(1, len(spans)), 1),
    }


def render(figures: Mapping[str, Any] | None, per_message: Mapping[str, float] | None = None) -> list[str]:
    cost = ""
    if per_message:
        cost = (
            f"; per message in process: off {per_message['off']} µs, on {per_message['on']} µs "
            f"+ {per_message['encode']} µs to encode its span"
        )
    if not figures:
        return [f"tracing         : off{cost}"]
    return [
        f"tracing         : on, {figures['spans']} spans exported over OTLP/HTTP "
        f"({figures['spans_per_task']} per task, {figures['exports']} requests){cost}"
    ]
