"""One trace follows a task across every Kafka hop: real role processes exporting over OTLP/HTTP to a
receiver in this process (devstack/otlp_receiver.py), on the real Kafka and Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from cli_run import wakeful
from confluent_kafka import Producer
from helpers import answers, free_ports, kafka_as, start_fleet

from wakeful.consumers.kafka.client import partition_of
from wakeful.core import ids, topics
from wakeful.core.kafka_rights import UPSTREAM
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.devstack.otlp_receiver import Received, Receiver
from wakeful.operate.audit import read as audit_read
from wakeful.operate.audit.file import Logged
from wakeful.operate.client import REQUESTER, Client
from wakeful.producers.signing import sign_event
from wakeful.schemas import events

UPSTREAM_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
UPSTREAM_SPAN = "00f067aa0ba902b7"
HOPS = ("inbound", "gate", "proposer", "executor")


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    found = Receiver().start()
    yield found
    found.stop()


@pytest.fixture(scope="module")
def traced(client: Client, receiver: Receiver) -> Iterator[Fleet]:
    """A fleet exporting its spans to `receiver`, batched for 100 ms at most."""
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    env.pop("OTEL_SERVICE_NAME", None)
    fleet = start_fleet(client, env=env)
    yield fleet
    fleet.stop()


def create_with(client: Client, traceparent: bytes, named: str | None = None) -> str:
    """Publish a small refund's create, its traceparent header as given; the runtime's task id."""
    named = named or f"t-trace-{uuid.uuid4().hex[:10]}"
    event = sign_event(
        client.signer(REQUESTER), events.CREATE, {"amount": 20, "currency": "EUR"}, task_id=named
    )
    producer = Producer(kafka_as(client.settings.kafka_bootstrap, UPSTREAM) | {"acks": "all"})
    producer.produce(
        topics.EVENTS, key=named.encode(), value=event.encode(), headers=[("traceparent", traceparent)]
    )
    assert producer.flush(10) == 0
    return ids.task_in(client.tenant_of(REQUESTER), named)


def sharing(client: Client, task_id: str) -> str:
    """A task name whose runtime id goes to the same partition as `task_id`."""
    partitions, tenant = client.settings.partitions, client.tenant_of(REQUESTER)
    while True:
        named = f"t-trace-{uuid.uuid4().hex[:10]}"
        if partition_of(ids.task_in(tenant, named), partitions) == partition_of(task_id, partitions):
            return named


def whole_trace(receiver: Receiver, task_id: str, timeout: float = 20.0) -> dict[str, Received]:
    """The spans of the trace the task's inbound span is in, by name, once every hop is there."""
    names = {*(f"wakeful.{hop} handle" for hop in HOPS), "wakeful.tool refund", "wakeful.relay publish"}
    deadline = time.monotonic() + timeout
    spans: dict[str, Received] = {}
    while time.monotonic() < deadline:
        inbound = [
            s for s in receiver.having("wakeful.task_id", task_id) if s.name == "wakeful.inbound handle"
        ]
        if inbound:
            spans = {s.name: s for s in receiver.trace(inbound[0].trace_id)}
            if names <= spans.keys():
                return spans
        time.sleep(0.1)
    raise AssertionError(f"trace of {task_id} never held {sorted(names)}: it held {sorted(spans)}")


def test_one_trace_follows_a_task_from_its_event_through_every_hop_to_its_effect(
    client: Client, traced: Fleet, receiver: Receiver
) -> None:
    parent = f"00-{UPSTREAM_TRACE}-{UPSTREAM_SPAN}-01".encode()
    task_id = create_with(client, parent)
    # raw bytes, huge: a new root. On the first task's partition of wakeful.log, so that the relay
    # is likely to publish both tasks' records in one message, each still in its own trace.
    hostile_id = create_with(client, b"\xff\x00" + b"00-" * 5000, sharing(client, task_id))
    assert client.wait_settled(task_id)["stage"] == "closed"
    assert client.wait_settled(hostile_id)["stage"] == "closed"

    spans = whole_trace(receiver, task_id)
    inbound, gate, proposer, executor = (spans[f"wakeful.{hop} handle"] for hop in HOPS)
    tool, relay = spans["wakeful.tool refund"], spans["wakeful.relay publish"]
    # the upstream system's trace goes on: every hop in it, each the child of the one that sent to it
    assert {s.trace_id for s in spans.values()} == {UPSTREAM_TRACE}
    assert inbound.parent_id == UPSTREAM_SPAN
    assert (gate.parent_id, proposer.parent_id, executor.parent_id) == (
        inbound.span_id,
        gate.span_id,
        proposer.span_id,
    )
    assert tool.parent_id == executor.span_id and relay.parent_id in (gate.span_id, executor.span_id)
    assert relay.attributes["wakeful.task_id"] == task_id  # its own span, whoever shares its message
    assert {s.kind for s in (inbound, gate, proposer, executor)} == {"consumer"} and relay.kind == "producer"
    assert {hop: spans[f"wakeful.{hop} handle"].service for hop in HOPS} == {
        hop: f"wakeful-{hop}" for hop in HOPS
    }
    # stamped with the task, its versions, and the policy and tool catalog it runs under
    for span in (gate, executor):
        assert span.attributes["wakeful.task_id"] == task_id
        assert span.attributes["wakeful.app"] == "refund" and span.attributes["wakeful.workflow"] == "refund"
        assert span.attributes["wakeful.task_version"] == 1
        assert span.attributes["wakeful.policy_version"] and span.attributes["wakeful.tool_catalog_version"]
    assert executor.attributes["wakeful.tool_catalog_version"] == client.app.catalog
    assert inbound.attributes["wakeful.task_id"] == proposer.attributes["wakeful.task_id"] == task_id
    assert tool.attributes["wakeful.tool.outcome"] == "succeeded"
    assert executor.attributes["wakeful.op_key"] == f"REFUND:{task_id}:v1"

    hostile = whole_trace(receiver, hostile_id)
    assert hostile["wakeful.inbound handle"].parent_id == ""  # ignored, never an error
    assert hostile["wakeful.gate handle"].parent_id == hostile["wakeful.inbound handle"].span_id


def test_a_deadlines_wake_starts_a_trace_of_its_own_that_the_gate_goes_on_with(
    client: Client, traced: Fleet, receiver: Receiver
) -> None:
    task_id, _ = client.new_task(2500, wait_s=1)  # waits for an approval that never comes
    assert client.wait_stage(task_id, {"needs_review"}, timeout=30)["stage"] == "needs_review"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        woken = [s for s in receiver.having("wakeful.task_id", task_id) if s.name == "wakeful.timer wake"]
        gates = (
            [s for s in receiver.trace(woken[0].trace_id) if s.name == "wakeful.gate handle"] if woken else []
        )
        if gates:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"no timer span, or no gate span under it, for {task_id}")
    (wake,) = woken
    assert wake.parent_id == "" and wake.kind == "producer" and wake.service == "wakeful-timer"
    assert [g.parent_id for g in gates] == [wake.span_id]
    assert gates[0].attributes["wakeful.stage"] == "needs_review"


def test_a_traceparent_on_the_log_leaves_its_signatures_verifying(
    client: Client, traced: Fleet, settings: Settings
) -> None:
    task_id, _ = client.new_task(30)
    assert client.wait_settled(task_id)["stage"] == "closed"
    close = f'"message_id":"rt:close:REFUND:{task_id}:v1"'.encode()

    def logged() -> list[Logged]:
        found = list(audit_read.from_kafka(settings, task_id))
        return found if any(close in m.value for m in found) else []

    assert wait_until(lambda: bool(logged()), 30), "the relay never published the close"
    assert all(any(name == "traceparent" for name, _ in m.headers) for m in logged())
    shown = wakeful("audit", task_id, "--verify")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "verified: every link holds" in shown.stdout


def test_a_post_to_the_http_door_is_the_first_hop_of_its_trace(
    client: Client, traced: Fleet, receiver: Receiver
) -> None:
    (port,) = free_ports(1)
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    env.pop("OTEL_SERVICE_NAME", None)
    door = subprocess.Popen(
        [sys.executable, "-m", "wakeful.cli.main", "ingress", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: answers(url), 30), "the door did not answer its health check"
        named = f"t-trace-{uuid.uuid4().hex[:10]}"
        event = sign_event(
            client.signer(REQUESTER), events.CREATE, {"amount": 20, "currency": "EUR"}, task_id=named
        )
        trace, span = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
        headers = {"Content-Type": "application/json", "traceparent": f"00-{trace}-{span}-01"}
        assert httpx.post(f"{url}/v1/events", content=event.encode(), headers=headers).status_code == 202
        task_id = ids.task_in(client.tenant_of(REQUESTER), named)
        assert client.wait_settled(task_id)["stage"] == "closed"
        spans = whole_trace(receiver, task_id)
        assert wait_until(lambda: "wakeful.ingress POST /v1/events" in _names(receiver, trace), 20)
    finally:
        door.terminate()
        door.wait(timeout=20)
    posted = next(s for s in receiver.trace(trace) if s.name == "wakeful.ingress POST /v1/events")
    assert (posted.kind, posted.service, posted.parent_id) == ("server", "wakeful-ingress", span)
    assert posted.attributes["wakeful.event_id"] == event.event_id
    assert spans["wakeful.inbound handle"].parent_id == posted.span_id
    assert {s.trace_id for s in spans.values()} == {trace}


def _names(receiver: Receiver, trace: str) -> set[str]:
    return {s.name for s in receiver.trace(trace)}
