"""The metrics (core/metrics.py): a dead letter's reason becomes one of a few classes, each
supervised process gets its own port, librdkafka's statistics give the consumer lag, the hooks
count only once metrics are on, and the Grafana dashboard draws exactly the metrics the code
defines. Pure: no server (the roles serving them: tests/test_metrics_stack.py)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from wakeful.cli.ingress_cmd import ingress
from wakeful.consumers.executor import steps as executor_steps
from wakeful.consumers.kafka import task_gauges
from wakeful.consumers.kafka.supervisor import (
    INGRESS_METRICS_HOST_ENV,
    INGRESS_METRICS_PORT_ENV,
    METRICS_HOST_ENV,
    METRICS_PORT_ENV,
    ROLES,
    members,
    metrics_at,
    spawn,
    supervised,
)
from wakeful.core import metrics
from wakeful.core.errors import ConfigError
from wakeful.core.metrics_pure import REASONS, lags, ports, reason_class
from wakeful.examples.refund import app as refund_app
from wakeful.workflow import pending

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "wakeful.json"
DOC = Path(__file__).parents[2] / "docs" / "metrics.md"
# Defined, and on no panel of the dashboard, on purpose (none today).
NOT_ON_THE_DASHBOARD: set[str] = set()

# Reasons as the roles write them (ids and all), and the class a label may say.
REASONS_TABLE = [
    ("malformed event: Expecting value: line 1 column 1 (char 0)", "malformed"),
    ("malformed proposal: ValidationError('1 validation error for Proposal')", "malformed"),
    ("proposal request or answer has the wrong shape: KeyError('window')", "malformed"),
    ("bad signature for key id 'k-17'", "bad_signature"),
    ("unsigned message on wakeful.wake: only inbound, timer may send there", "bad_signature"),
    ("wake carries an event whose signature does not verify (k-2)", "bad_signature"),
    ("unknown key id 'k-99'", "unknown_key"),
    ("message on wakeful.wake is signed by key 'x', not a key of inbound, timer", "unknown_key"),
    ("inbound could not take this event: unknown key id 'k-4'", "unknown_key"),
    ("key 'k-3' (mallory) may not send approval", "not_allowed"),
    ("role gate may not send on wakeful.wake (only inbound, timer)", "not_allowed"),
    ("bob is not among the approvers this wait names", "not_allowed"),
    ("not an authorised approver", "not_allowed"),  # the refund app's policy, in its words
    ("event is too old: issued 2026-01-01T00:00:00+00:00, max age 3600s", "stale"),
    ("event is from the future: issued 2031-01-01T00:00:00+00:00", "stale"),
    ("duplicate event ev-1 from key k-1", "duplicate"),
    ("proposal refused: task t-1 is quarantined: tampered", "quarantined"),
    ("unknown correlation id 'c-7'", "unknown_task"),
    ("no task acme.t-9", "unknown_task"),
    ("held wake: unreadable held wake: ValueError: x", "held"),
    ("gate failed on this message: KeyError('not found')", "poison"),
    ("Kafka refused this message's output to wakeful.log for good: MSG_SIZE_TOO_LARGE", "kafka_refused"),
    ("replay of letter 0:17: its event is past its max age", "stale"),
    ("replay of letter 0:17: the operator is not an approver", "not_allowed"),
    ("replay of letter 0:17: sent twice", "replay"),
    ("proposal refused: gate 4: tool catalog v3 is not the task's", "refused"),
    ("something nobody wrote a class for", "other"),
    ("", "other"),
]


@pytest.mark.parametrize(("reason", "expected"), REASONS_TABLE)
def test_a_dead_letter_reason_becomes_one_of_a_few_classes(reason: str, expected: str) -> None:
    assert reason_class(reason) == expected
    assert reason_class(reason.upper()) == expected  # case never changes the class


def test_every_reason_class_is_in_the_docs_and_the_table_names_no_other() -> None:
    text = DOC.read_text()
    for name in REASONS:
        assert f"`{name}`" in text, f"docs/metrics.md does not name the reason class {name}"
    assert {expected for _, expected in REASONS_TABLE} <= set(REASONS)


def test_each_supervised_process_gets_its_own_port_in_role_order() -> None:
    names = members(ROLES, {"gate": 2, "executor": 3})
    got = ports(names, 9400)
    assert list(got.values()) == list(range(9400, 9400 + len(names)))
    assert got["inbound"] == 9400 and got["gate"] == 9401 and got["gate#2"] == 9402
    assert got["executor#3"] == 9406 and got["relay"] == 9408
    with pytest.raises(ValueError, match="past port 65535"):
        ports(names, 65530)


def test_the_supervised_door_serves_its_metrics_on_the_port_after_the_roles_never_its_own() -> None:
    """`worker all --ingress-port N --metrics-port M`: the door's metrics listener is M+6, the
    roles' ports are what they were without the door, and its process is told the port by a
    variable of its own (WAKEFUL_INGRESS_METRICS_PORT, which `wakeful ingress --metrics-port`
    reads): a shell that exported a role's port never binds the door to it."""
    got = ports(supervised(ROLES, {"gate": 2}, door=True), 9400)
    assert got == {**ports(members(ROLES, {"gate": 2}), 9400), "ingress": 9407}
    assert supervised(ROLES, None, door=False) == members(ROLES)
    option = next(p for p in ingress.params if "--metrics-port" in p.opts)
    assert option.envvar == INGRESS_METRICS_PORT_ENV != METRICS_PORT_ENV and option.default is None
    host = next(p for p in ingress.params if "--metrics-host" in p.opts)
    assert host.envvar == INGRESS_METRICS_HOST_ENV != METRICS_HOST_ENV and host.default == "127.0.0.1"


def _taken_after_a_free_port() -> socket.socket:
    """A listening socket on a port whose predecessor is free (another process may hold a random
    port's predecessor, which would be named first)."""
    for _ in range(100):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        with socket.socket() as before:
            try:
                before.bind(("127.0.0.1", port - 1))
            except OSError:
                taken.close()
                continue
        taken.listen()
        return taken
    raise AssertionError("no free port with a free one before it")


def test_a_taken_metrics_port_stops_the_supervisor_at_start_naming_the_option() -> None:
    with _taken_after_a_free_port() as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=r"--metrics-port.*gate's metrics on 127\.0\.0\.1"):
            metrics_at(["inbound", "gate"], ("127.0.0.1", port - 1))
    assert metrics_at(["gate"], None) == {}


def test_a_spawned_role_serves_metrics_only_on_the_port_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, str]] = []

    class Started:
        def __init__(self, argv: list[str], **kwargs: Any) -> None:
            seen.append(kwargs["env"])

    monkeypatch.setattr("subprocess.Popen", Started)
    env = {"WAKEFUL_METRICS_PORT": "9400", "WAKEFUL_METRICS_HOST": "0.0.0.0"}
    spawn("gate", [], env=env)
    spawn("gate#2", [], env=env, metrics_at=("127.0.0.1", 9402))
    spawn("ingress", [], env=env, ingress_port=18080)
    spawn("ingress", [], env=env, ingress_port=18080, metrics_at=("127.0.0.1", 9407))
    assert "WAKEFUL_METRICS_PORT" not in seen[0] and "WAKEFUL_METRICS_HOST" not in seen[0]
    assert seen[1]["WAKEFUL_METRICS_PORT"] == "9402" and seen[1]["WAKEFUL_METRICS_HOST"] == "127.0.0.1"
    assert "WAKEFUL_METRICS_PORT" not in seen[2]
    assert seen[3]["WAKEFUL_INGRESS_METRICS_PORT"] == "9407"
    assert seen[3]["WAKEFUL_INGRESS_METRICS_HOST"] == "127.0.0.1"
    assert "WAKEFUL_METRICS_PORT" not in seen[3]  # a role's port, never the door's


def test_consumer_lag_comes_from_the_partitions_librdkafka_fetches() -> None:
    stats = {
        "topics": {
            "wakeful.wake": {
                "partitions": {
                    "0": {"partition": 0, "consumer_lag": 7, "fetch_state": "active"},
                    "1": {"partition": 1, "consumer_lag": -1, "fetch_state": "active"},
                    "2": {"partition": 2, "consumer_lag": 3, "fetch_state": "none"},
                    "-1": {"partition": -1, "consumer_lag": 5},
                }
            }
        }
    }
    assert lags(stats) == {("wakeful.wake", "0"): 7}
    assert lags({}) == {}


def test_a_tool_calls_outcome_is_named_from_what_call_once_returned() -> None:
    assert metrics.PENDING_MARK == pending.MARK
    assert metrics.tool_outcome({"entry": 1}) == "ok"
    assert metrics.tool_outcome({pending.MARK: True}) == "pending"
    assert metrics.tool_outcome("bank refused: closed account") == "refused"
    assert metrics.tool_outcome(executor_steps.Unavailable("down")) == "unavailable"


def _sample(name: str, labels: dict[str, str]) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return value or 0.0


def test_hooks_count_nothing_while_metrics_are_off_and_every_event_once_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    labels = {"role": "unit-role", "topic": "t"}
    monkeypatch.setattr(metrics, "_on", False)
    metrics.handled("unit-role", "t", metrics.clock())
    assert metrics.consumer_stats("unit-role") == {}
    assert _sample("wakeful_messages_handled_total", labels) == 0
    monkeypatch.setattr(metrics, "_on", True)
    metrics.handled("unit-role", "t", metrics.clock())
    metrics.handled("unit-role", "t", metrics.clock())
    metrics.dead_lettered("unit-role", "t", "duplicate event ev-9 from key k")
    metrics.retried("unit-role", type("LeaseLost", (Exception,), {})())
    metrics.effect_recorded(_Cp("unit-wf", datetime.now(UTC) - timedelta(seconds=2)), "applied")
    metrics.effect_recorded(_Cp("unit-wf", datetime.now(UTC)), "duplicate")
    metrics.model_usage("unit-model", {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35})
    metrics.model_usage("unit-model", {"total_tokens": 9})
    assert _sample("wakeful_messages_handled_total", labels) == 2
    assert _sample("wakeful_handle_seconds_count", {"role": "unit-role"}) == 2
    assert _sample("wakeful_messages_dead_lettered_total", {**labels, "reason": "duplicate"}) == 1
    assert _sample("wakeful_retries_total", {"role": "unit-role", "cause": "LeaseLost"}) == 1
    assert _sample("wakeful_lease_losses_total", {"role": "unit-role"}) == 1
    assert _sample("wakeful_wake_to_effect_seconds_count", {"workflow": "unit-wf"}) == 1
    assert _sample("wakeful_wake_to_effect_seconds_sum", {"workflow": "unit-wf"}) >= 2
    assert _sample("wakeful_model_tokens_total", {"model": "unit-model", "kind": "prompt"}) == 30
    assert _sample("wakeful_model_tokens_total", {"model": "unit-model", "kind": "completion"}) == 5
    assert _sample("wakeful_model_tokens_total", {"model": "unit-model", "kind": "total"}) == 9
    stats = metrics.consumer_stats("unit-role")
    assert stats["statistics.interval.ms"] == metrics.STATS_INTERVAL_MS
    shown = {"topics": {"x": {"partitions": {"0": {"consumer_lag": 4}, "1": {"consumer_lag": 2}}}}}
    stats["stats_cb"](json.dumps(shown))
    stats["stats_cb"](json.dumps({"topics": {"x": {"partitions": {"1": {"consumer_lag": 6}}}}}))
    stats["stats_cb"]("not json")
    lag = {"role": "unit-role", "topic": "x"}
    assert REGISTRY.get_sample_value("wakeful_consumer_lag", {**lag, "partition": "0"}) is None
    assert _sample("wakeful_consumer_lag", {**lag, "partition": "1"}) == 6
    body, kind = metrics.exposition()
    assert (
        kind.startswith("text/plain")
        and b'wakeful_messages_handled_total{role="unit-role",topic="t"} 2.0' in body
    )


class _Cp:
    def __init__(self, workflow: str, updated_at: datetime) -> None:
        self.business = type("B", (), {"workflow": workflow})()
        self.updated_at = updated_at


def test_the_task_gauges_read_stage_and_wait_sets_and_judge_stuck_from_summaries() -> None:
    stages, waits = task_gauges.index_keys(
        [b"wk:index:{acme}:stage:ready", "wk:index:{acme}:wait:approval", b"wk:index:{acme}:tasks", "wk:x"]
    )
    assert stages == {"wk:index:{acme}:stage:ready": "ready"}
    assert waits == {"wk:index:{acme}:wait:approval": "approval"}
    assert task_gauges.tasks_key("wk:index:{acme}:stage:ready") == "wk:index:{acme}:tasks"
    summaries = [
        json.dumps({"stage": "ready", "waits": []}).encode(),
        json.dumps({"stage": "ready", "waits": [{"wait_for": "approval"}]}).encode(),
        json.dumps({"stage": "closed", "waits": []}).encode(),  # moved on since it was listed
        None,
        b"{not json",
    ]
    assert task_gauges.stuck_among(summaries, "ready") == 1
    live = task_gauges.live_stages(refund_app)
    assert "closed" not in live and "needs_review" not in live and live


def _defined() -> dict[str, Any]:
    return {m._name: m for m in metrics.ALL}


def _named_on_dashboard() -> set[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", ())]
    found = {n for e in exprs for n in re.findall(r"\bwakeful_[a-z0-9_]+", e)}
    return {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in found}


def test_every_metric_a_panel_draws_is_defined_and_every_defined_one_is_drawn() -> None:
    defined, drawn = set(_defined()), _named_on_dashboard()
    assert drawn - defined == set(), "panels name metrics the code does not define"
    assert defined - drawn - NOT_ON_THE_DASHBOARD == set(), "metrics on no panel (or list them as left off)"


def test_the_dashboard_imports_with_a_prometheus_datasource_variable() -> None:
    board = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_metric_is_documented_with_its_labels() -> None:
    text = DOC.read_text()
    for name, metric in _defined().items():
        shown = f"{name}_total" if metric._type == "counter" else name
        assert f"`{shown}`" in text, f"docs/metrics.md does not describe {shown}"
        for label in metric._labelnames:
            assert f"`{label}`" in text, f"docs/metrics.md does not name the label {label} of {shown}"


def test_a_role_given_a_taken_metrics_port_stops_at_once_naming_the_option() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "wakeful.cli.main", "worker", "timer", "--metrics-port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert f"--metrics-port (WAKEFUL_METRICS_PORT): cannot serve metrics on 127.0.0.1:{port}" in done.stderr


def test_the_ingress_counts_its_answers_by_route_template_and_status(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_on", False)  # no metrics port: nothing is counted, as for a role
    metrics.ingress_answered("/v1/teapot", 418, metrics.clock())
    assert (
        REGISTRY.get_sample_value("wakeful_ingress_requests_total", {"route": "/v1/teapot", "status": "418"})
        is None
    )
    monkeypatch.setattr(metrics, "_on", True)
    metrics.ingress_answered("/v1/events", 202, metrics.clock())
    assert _sample("wakeful_ingress_requests_total", {"route": "/v1/events", "status": "202"}) >= 1
    assert _sample("wakeful_ingress_seconds_count", {"route": "/v1/events"}) >= 1


def test_the_options_the_page_shows_are_the_workers_own() -> None:
    from wakeful.cli.worker_cmd import worker

    options = {o for p in worker.params for o in p.opts}
    envs = {p.envvar for p in worker.params if isinstance(p.envvar, str)}
    text = DOC.read_text()
    for shown in re.findall(r"--metrics-[a-z]+", text):
        assert shown in options, f"docs/metrics.md shows {shown}, which `wakeful worker` does not take"
    for shown in re.findall(r"WAKEFUL_METRICS_[A-Z]+", text):
        assert shown in envs, f"docs/metrics.md shows {shown}, which `wakeful worker` does not read"
