"""core/tracing.py with an in-memory exporter: spans parented by the consumed message's headers,
the current context written into what is produced, attributes stamped, and nothing at all when off."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from helpers import new_checkpoint
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from wakeful.consumers.kafka.handling import Handling
from wakeful.core import tracing
from wakeful.core.log import Log
from wakeful.core.trace_headers import parse_traceparent

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@dataclass
class Consumed:
    _headers: Any = None
    _topic: str = "wakeful.wake"

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 3

    def offset(self) -> int:
        return 17

    def key(self) -> bytes:
        return b"t-1"

    def headers(self) -> Any:
        return self._headers


@pytest.fixture()
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    assert tracing.start("gate", {}, exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.shutdown()


def finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    tracing._spans.provider.force_flush()  # type: ignore[union-attr]  # started by the fixture
    return list(exporter.get_finished_spans())


def test_off_without_an_endpoint_and_every_call_is_a_no_op() -> None:
    assert not tracing.start("gate", {}) and not tracing.on()
    headers = [("wakeful-kid", b"k")]
    assert tracing.inject(headers) is headers and tracing.inject(None) is None
    with tracing.handling("gate", Consumed([("traceparent", GOOD.encode())])) as span:
        assert span is None
        tracing.stamp(task_id="t-1")
        assert tracing.kafka_headers() == [] and tracing.outbox_field() == ()


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
    ],
)
def test_on_only_when_an_otlp_endpoint_is_named(env: Mapping[str, str], on: bool) -> None:
    assert tracing.configured(env) is on


@pytest.mark.parametrize(
    ("env", "url"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://c:4318/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces"),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:9/x", "OTEL_EXPORTER_OTLP_ENDPOINT": "y"},
            "http://c:9/x",
        ),
    ],
)
def test_spans_go_to_the_signal_path_unless_the_traces_endpoint_is_given(
    env: Mapping[str, str], url: str
) -> None:
    assert tracing.endpoint(env) == url


def test_a_handled_message_is_a_consumer_span_under_its_traceparent(exported: InMemorySpanExporter) -> None:
    with tracing.handling("gate", Consumed([("traceparent", GOOD.encode())])):
        tracing.stamp(task_id="t-1", task_version=2, unknown=None)
    (span,) = finished(exported)
    assert span.name == "wakeful.gate handle" and span.kind is SpanKind.CONSUMER
    assert span.parent is not None and span.parent.is_remote
    assert (span.context.trace_id, span.parent.span_id) == (
        0x4BF92F3577B34DA6A3CE929D0E0E4736,
        0x00F067AA0BA902B7,
    )
    attributes = dict(span.attributes or {})
    assert attributes["wakeful.task_id"] == "t-1" and attributes["wakeful.task_version"] == 2
    assert "wakeful.unknown" not in attributes
    assert attributes["messaging.destination.name"] == "wakeful.wake"
    assert span.resource.attributes["service.name"] == "wakeful-gate"


@pytest.mark.parametrize(
    "headers",
    [
        None,
        [],
        [("traceparent", b"\xff" * 60)],
        [("traceparent", b"00-" + b"f" * 100_000)],
        [("traceparent", GOOD.encode()), ("traceparent", GOOD.encode())],
        [("traceparent", GOOD.upper().encode())],
        "not headers at all",
    ],
)
def test_a_missing_or_hostile_traceparent_starts_a_new_trace(
    exported: InMemorySpanExporter, headers: Any
) -> None:
    with tracing.handling("executor", Consumed(headers)):
        pass
    (span,) = finished(exported)
    assert span.parent is None and span.context.trace_id != 0x4BF92F3577B34DA6A3CE929D0E0E4736


def test_what_a_handler_produces_carries_its_span_after_the_callers_headers(
    exported: InMemorySpanExporter,
) -> None:
    signed = [("wakeful-kid", b"k"), ("wakeful-sig", b"s")]
    with tracing.handling("gate", Consumed([("traceparent", GOOD.encode())])) as span:
        out = tracing.inject(signed)
        field = tracing.outbox_field()
    assert out[:2] == signed and [name for name, _ in out[2:]] == ["traceparent"]
    parent = parse_traceparent(out[2][1])
    assert parent is not None
    assert (parent.trace_id, parent.span_id) == (
        span.get_span_context().trace_id,
        span.get_span_context().span_id,
    )
    assert field == ("tp", out[2][1].decode())
    assert tracing.inject(None) is None  # no span current: nothing added


def test_the_handling_thread_owns_its_span_and_others_do_not_see_it(exported: InMemorySpanExporter) -> None:
    seen: dict[str, list[tuple[str, bytes]]] = {}

    def handle(name: str) -> None:
        with tracing.handling(name, Consumed()):
            seen[name] = tracing.kafka_headers()

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(handle, ["a", "b"]))
    seen["main"] = tracing.kafka_headers()
    spans = {s.name: s for s in finished(exported)}
    for name in ("a", "b"):
        parent = parse_traceparent(seen[name][0][1])
        assert parent is not None and parent.span_id == spans[f"wakeful.{name} handle"].context.span_id
    assert seen["main"] == []


def test_a_checkpoint_stamps_task_versions_and_stamps(exported: InMemorySpanExporter) -> None:
    cp = new_checkpoint("t-stamped")
    with tracing.handling("executor", Consumed()):
        tracing.stamp_task(cp, "refund")
    attributes = dict(finished(exported)[0].attributes or {})
    assert {
        k: attributes[f"wakeful.{k}"] for k in ("task_id", "app", "policy_version", "tool_catalog_version")
    } == {
        "task_id": "t-stamped",
        "app": "refund",
        "policy_version": "refund-policy-1",
        "tool_catalog_version": cp.versions.tool_catalog,
    }
    assert attributes["wakeful.workflow"] == cp.business.workflow
    assert attributes["wakeful.task_version"] == cp.business.version


@dataclass(frozen=True)
class Tool:
    name: str


@tracing.tool_call
def call(tool: Tool, result: Any) -> Any:
    if isinstance(result, Exception):
        raise result
    return result


class Unavailable:
    pass


@pytest.mark.parametrize(
    ("result", "outcome"),
    [
        ({"entry_id": "e-1"}, "succeeded"),
        ({"wakeful.pending": True}, "pending"),
        ("bank refused: no", "failed"),
        (Unavailable(), "unavailable"),
    ],
)
def test_a_tool_call_is_a_child_span_with_its_name_and_outcome(
    exported: InMemorySpanExporter, result: Any, outcome: str
) -> None:
    with tracing.handling("executor", Consumed()):
        assert call(Tool("pay"), result) is result
    spans = {s.name: s for s in finished(exported)}
    tool, handle = spans["wakeful.tool pay"], spans["wakeful.executor handle"]
    assert tool.parent is not None and tool.parent.span_id == handle.context.span_id
    assert dict(tool.attributes or {}) == {"wakeful.tool": "pay", "wakeful.tool.outcome": outcome}


def test_a_tool_that_raises_is_recorded_and_the_error_goes_on(exported: InMemorySpanExporter) -> None:
    with pytest.raises(RuntimeError), tracing.handling("executor", Consumed()):
        call(Tool("pay"), RuntimeError("boom"))
    spans = {s.name: s for s in finished(exported)}
    assert [e.name for e in spans["wakeful.tool pay"].events] == ["exception"]


def test_the_relays_publish_is_a_span_in_each_tasks_trace_and_the_first_is_current(
    exported: InMemorySpanExporter,
) -> None:
    other = "00-11111111111111111111111111111111-2222222222222222-01"
    tasks = [("t-1", GOOD.encode()), ("t-junk", b"junk"), ("t-2", other.encode())]
    with tracing.publishing("wakeful.relay publish", tasks, records=3):
        sent = tracing.kafka_headers()
    spans = {str(dict(s.attributes or {})["wakeful.task_id"]): s for s in finished(exported)}
    assert sorted(spans) == ["t-1", "t-2"]  # a traceparent that does not parse has no span
    assert spans["t-1"].context.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
    assert spans["t-2"].context.trace_id == 0x11111111111111111111111111111111
    assert all(s.kind is SpanKind.PRODUCER and s.parent is not None for s in spans.values())
    parent = parse_traceparent(sent[0][1])
    assert parent is not None and parent.span_id == spans["t-1"].context.span_id


def test_a_publish_with_no_traced_task_is_one_new_root(exported: InMemorySpanExporter) -> None:
    with tracing.publishing("wakeful.relay publish", [], records=1):
        pass
    (span,) = finished(exported)
    assert span.parent is None and dict(span.attributes or {}) == {"wakeful.records": 1}


def test_an_http_request_is_a_server_span_whose_context_rides_to_kafka(
    exported: InMemorySpanExporter,
) -> None:
    with tracing.server("wakeful.ingress POST /events", {"traceparent": GOOD}):
        headers = tracing.kafka_headers()
    (span,) = finished(exported)
    assert span.kind is SpanKind.SERVER and span.context.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
    parent = parse_traceparent(headers[0][1])
    assert parent is not None and parent.span_id == span.context.span_id


def test_the_runner_handles_each_message_inside_its_span(exported: InMemorySpanExporter) -> None:
    names: list[str] = []

    def handler(_msg: Any) -> None:
        names.append(str(tracing.kafka_headers()[0][0]))

    handling = Handling("proposer", handler, producer=None, log=Log())  # type: ignore[arg-type]  # produces nothing
    handling._handle(Consumed([("traceparent", GOOD.encode())]), threading.Event())  # type: ignore[arg-type]
    (span,) = finished(exported)
    assert names == ["traceparent"] and span.name == "wakeful.proposer handle"
    assert threading.current_thread() is threading.main_thread()


def test_an_upstream_publisher_carries_the_span_of_whatever_provider_is_current(
    exported: InMemorySpanExporter,
) -> None:
    assert tracing.carried({"event_id": b"e"}) == {"event_id": b"e"}  # no span: nothing added
    with tracing.server("upstream send", {}) as span:
        out = tracing.carried({"event_id": b"e"})
    parent = parse_traceparent(out["traceparent"])
    assert parent is not None and parent.span_id == span.get_span_context().span_id


def test_a_good_tracestate_goes_on_with_the_trace_and_a_bad_one_stays_behind(
    exported: InMemorySpanExporter,
) -> None:
    with tracing.handling("gate", Consumed([("traceparent", GOOD.encode()), ("tracestate", b"v=1,w=2")])):
        kept = dict(tracing.kafka_headers())
    with tracing.handling("gate", Consumed([("traceparent", GOOD.encode()), ("tracestate", b"\xff=1")])):
        dropped = dict(tracing.kafka_headers())
    assert kept["tracestate"] == b"v=1,w=2" and "tracestate" not in dropped


def test_the_sdks_own_warnings_land_in_the_roles_json_log(
    exported: InMemorySpanExporter, capfd: pytest.CaptureFixture[str]
) -> None:
    logging.getLogger("opentelemetry.sdk.trace.export").warning("export failed: %s", "refused")
    line = orjson.loads(capfd.readouterr().err.strip().splitlines()[-1])
    assert (line["event"], line["role"], line["message"]) == ("tracing.log", "gate", "export failed: refused")


def test_an_async_requests_span_stays_its_own_across_awaits(exported: InMemorySpanExporter) -> None:
    async def request(n: int) -> list[tuple[str, bytes]]:
        with tracing.server(f"request {n}", {}):
            await asyncio.sleep(0)  # the other request runs meanwhile
            return tracing.kafka_headers()

    async def both() -> list[list[tuple[str, bytes]]]:
        return list(await asyncio.gather(request(1), request(2)))

    sent = asyncio.run(both())
    spans = {s.name: s for s in finished(exported)}
    for n, headers in enumerate(sent, start=1):
        parent = parse_traceparent(headers[0][1])
        assert parent is not None and parent.span_id == spans[f"request {n}"].context.span_id


def test_an_endpoint_without_the_tracing_extra_stops_the_role_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from wakeful.core.errors import ConfigError

    tracing.shutdown()  # whatever an earlier test left on
    monkeypatch.delitem(sys.modules, "wakeful.core.trace_spans", raising=False)
    monkeypatch.delattr("wakeful.core.trace_spans", raising=False)  # the package's own reference
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'wakeful\[tracing\]'"):
        tracing.start("gate", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert not tracing.on()


def test_the_cli_keeps_redis_from_loading_the_opentelemetry_metrics_sdk_at_every_start() -> None:
    import subprocess

    code = (
        "import wakeful.cli, redis, sys; "
        "from redis.observability import providers; "
        "print(providers.OTEL_AVAILABLE, 'opentelemetry.sdk.trace' in sys.modules)"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert shown.stdout.split() == ["False", "False"]  # and the trace SDK is loaded only when tracing starts
