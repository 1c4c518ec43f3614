"""Every Prometheus metric a wakeful process exports, and the one-call hooks that move them.

A role serves them on `GET /metrics` only when started with `--metrics-port` (WAKEFUL_METRICS_PORT;
`serve`); until then every hook returns at its first line, so a process without the option pays a
flag test per event and exports nothing. Labels are small fixed sets (role, topic, stage, tool,
reason class...): never a task id or free text. docs/metrics.md lists each metric; the Grafana
dashboard (docs/grafana/wakeful.json) draws them. The pure parts (`reason_class`, `ports`,
`lags`) are in core/metrics_pure.py. This module sits in core so that state/ (CAS conflicts,
transitions) may count too.
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import orjson
from prometheus_client import REGISTRY, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest, start_http_server

from wakeful.core.errors import ConfigError
from wakeful.core.log import Log
from wakeful.core.metrics_pure import lags, quarantine_class, reason_class

LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SLOW = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)
PENDING_MARK = "wakeful.pending"  # workflow/pending.MARK: a tool's answer that comes later
STATS_INTERVAL_MS = 5_000  # librdkafka's statistics (consumer lag), only with metrics on

# ---- per message (consumers/kafka/handling.py) ----
HANDLED = Counter("wakeful_messages_handled", "Messages a role's handler finished", ["role", "topic"])
DEAD_LETTERED = Counter(
    "wakeful_messages_dead_lettered", "Messages sent to wakeful.dlq", ["role", "topic", "reason"]
)
SUPERSEDED = Counter(
    "wakeful_messages_superseded",
    "Messages dropped because their task moved on since they were made (not dead-lettered)",
    ["role", "topic"],
)
RETRIES = Counter(
    "wakeful_retries", "Handler attempts that failed and will be tried again", ["role", "cause"]
)
LEASE_LOSSES = Counter("wakeful_lease_losses", "Handler attempts that found their task lease lost", ["role"])
HANDLE_SECONDS = Histogram(
    "wakeful_handle_seconds", "Time a role's handler took for one message", ["role"], buckets=LATENCY
)
# ---- state (state/store.py) ----
TRANSITIONS = Counter(
    "wakeful_transitions", "Task changes applied, by workflow and new stage", ["workflow", "stage"]
)
CAS_CONFLICTS = Counter(
    "wakeful_cas_conflicts", "Compare-and-swap writes that lost a race (WatchError)", ["op"]
)
# ---- the executor ----
TOOL_CALLS = Counter("wakeful_tool_calls", "Tool calls the executor made, by outcome", ["tool", "outcome"])
TOOL_SECONDS = Histogram("wakeful_tool_call_seconds", "Time one tool call took", ["tool"], buckets=LATENCY)
WAKE_TO_EFFECT = Histogram(
    "wakeful_wake_to_effect_seconds",
    "From the task's last change (the wake that asked for the step) to the step's outcome recorded",
    ["workflow"],
    buckets=SLOW,
)
# ---- the proposer ----
MODEL_CALLS = Counter("wakeful_model_calls", "Model calls, by outcome", ["model", "outcome"])
MODEL_SECONDS = Histogram("wakeful_model_seconds", "Time one model call took", ["model"], buckets=SLOW)
MODEL_TOKENS = Counter("wakeful_model_tokens", "Tokens the model reported spending", ["model", "kind"])
# ---- the timer and the relay ----
TIMER_WAKES = Counter("wakeful_timer_wakes", "Deadline wakes the timer published")
SWEPT = Counter(
    "wakeful_tasks_swept", "Tasks the timer's sweep found with nothing to wake them, and woke", ["stage"]
)
RELAY_RECORDS = Counter("wakeful_relay_records", "Outbox records the relay published to wakeful.log")
# ---- read from Redis by the relay, every few seconds (consumers/kafka/task_gauges.py) ----
TASKS = Gauge("wakeful_tasks", "Tasks at each stage (the task index)", ["stage"])
WAITING = Gauge(
    "wakeful_tasks_waiting", "Tasks waiting, by what they wait for (the task index)", ["wait_for"]
)
WAITS_DUE = Gauge("wakeful_waits_due", "Deadlines due by now+window (the timer's deadline index)", ["within"])
STUCK = Gauge("wakeful_tasks_stuck", "Tasks nothing will move on (workflow/stuck.py), by stage", ["stage"])
QUARANTINED = Gauge("wakeful_tasks_quarantined", "Tasks quarantined (parked for good), counted every minute")
GAUGES_AGE = Gauge("wakeful_task_gauges_refreshed", "Unix time the task gauges were last read from Redis")
# ---- Kafka (librdkafka's statistics) ----
CONSUMER_LAG = Gauge(
    "wakeful_consumer_lag", "Messages behind the partition's end, per group", ["role", "topic", "partition"]
)
# -- the HTTP ingress (counted by consumers/ingress/main.py; served on its metrics port, never the door's) --
INGRESS_REQUESTS = Counter(
    "wakeful_ingress_requests", "HTTP requests the ingress answered", ["route", "status"]
)
INGRESS_SECONDS = Histogram(
    "wakeful_ingress_seconds", "Time the ingress took to answer", ["route"], buckets=LATENCY
)
# ---- what the alerts watch (docs/alerts.md) ----
QUARANTINES = Counter(
    "wakeful_quarantines", "Tasks quarantined, by reason class (metrics_pure.QUARANTINE_REASONS)", ["reason"]
)
EVENTS_REFUSED = Counter(
    "wakeful_events_refused", "Signed events the gate refused (the receipt says why), by class", ["reason"]
)
WRONG_TENANT = Counter(
    "wakeful_wrong_tenant_events", "Signed events aimed at another tenant's task or wait", ["role"]
)
UNEXPECTED_TOOLS = Counter(
    "wakeful_unexpected_tools",
    "Proposals naming a tool the app lacks (tool: unknown) or the task's stage does not offer",
    ["app", "tool"],
)
EGRESS_REFUSED = Counter(
    "wakeful_egress_refused", "Tool runs the egress guard refused a connection to (D116)", ["app", "tool"]
)

ALL = (
    HANDLED,
    DEAD_LETTERED,
    RETRIES,
    LEASE_LOSSES,
    HANDLE_SECONDS,
    TRANSITIONS,
    CAS_CONFLICTS,
    TOOL_CALLS,
    TOOL_SECONDS,
    WAKE_TO_EFFECT,
    MODEL_CALLS,
    MODEL_SECONDS,
    MODEL_TOKENS,
    TIMER_WAKES,
    RELAY_RECORDS,
    TASKS,
    WAITING,
    WAITS_DUE,
    STUCK,
    QUARANTINED,
    GAUGES_AGE,
    CONSUMER_LAG,
    INGRESS_REQUESTS,
    INGRESS_SECONDS,
    QUARANTINES,
    EVENTS_REFUSED,
    WRONG_TENANT,
    UNEXPECTED_TOOLS,
    EGRESS_REFUSED,
)

# A `_created` series per counter doubles what a scrape reads, for nothing here (the client leaves
# this function untyped).
disable_created_metrics()  # type: ignore[no-untyped-call]
_on = False
_kids: dict[tuple[int, tuple[str, ...]], Any] = {}
F = TypeVar("F", bound=Callable[..., Any])


def enabled() -> bool:
    return _on


def enable() -> None:
    """Count from now on (serve() calls it; tests call it to count without a server)."""
    global _on  # noqa: PLW0603 -- one switch for the whole process, set once at start
    _on = True


def serve(port: int, host: str = "127.0.0.1", role: str = "") -> None:
    """Serve GET /metrics on host:port from a daemon thread, and count from now on; a port that
    cannot be bound is a ConfigError naming the option."""
    try:
        start_http_server(port, addr=host)
    except OSError as exc:
        raise ConfigError(
            "--metrics-port (WAKEFUL_METRICS_PORT)",
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; choose a free port",
        ) from exc
    enable()
    Log(role=role)("metrics.serving", url=f"http://{host}:{port}/metrics")


def check_free(host: str, port: int, who: str) -> None:
    """ConfigError naming the option if host:port cannot be bound now (for `who`'s metrics)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        # As the server binds: a port left in TIME_WAIT by the last scrape of a stopped role is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                "--metrics-port (WAKEFUL_METRICS_PORT)",
                f"cannot serve {who}'s metrics on {host}:{port}: {exc.strerror or exc}; choose a free port",
            ) from exc


def exposition() -> tuple[bytes, str]:
    """This process's metrics in the Prometheus text format: (body, content type), for an HTTP
    server of an app's own to answer GET /metrics with. The door does not: its public port would
    publish them (D90); it serves them on its metrics port, as a role does (serve())."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def clock() -> float:
    return time.perf_counter()


def _kid(metric: Any, *values: str) -> Any:
    """metric.labels(*values), kept: the label lookup takes a lock; this dict read does not."""
    key = (id(metric), values)
    kid = _kids.get(key)
    if kid is None:
        kid = _kids[key] = metric.labels(*values)
    return kid


# ---- hooks: one call per event, each a no-op while metrics are off ----


def handled(role: str, topic: str | None, started: float) -> None:
    if _on:
        _kid(HANDLED, role, topic or "").inc()
        _kid(HANDLE_SECONDS, role).observe(time.perf_counter() - started)


def retried(role: str, exc: BaseException) -> None:
    if _on:
        cause = type(exc).__name__
        _kid(RETRIES, role, cause).inc()
        if cause == "LeaseLost":
            _kid(LEASE_LOSSES, role).inc()


def dead_lettered(role: str, topic: str | None, reason: str) -> None:
    if _on:
        _kid(DEAD_LETTERED, role, topic or "", reason_class(reason)).inc()


def superseded(role: str, topic: str | None) -> None:
    if _on:
        _kid(SUPERSEDED, role, topic or "").inc()


def transition(workflow: str, stage: str) -> None:
    if _on:
        _kid(TRANSITIONS, workflow, stage).inc()


def cas_conflict(op: str) -> None:
    if _on:
        _kid(CAS_CONFLICTS, op).inc()


def effect_recorded(checkpoint: Any, status: str) -> None:
    """A step's outcome recorded by its close (status: the close's; only "applied" counts), for the
    task as it was loaded (a Checkpoint): its last change, `updated_at`, is the one the wake that
    asked for the step made."""
    if _on and status == "applied":
        wake_to_effect(checkpoint.business.workflow, checkpoint.updated_at)


def egress_refused(app: str, tool: str) -> None:
    if _on:
        _kid(EGRESS_REFUSED, app, tool).inc()


def wake_to_effect(workflow: str, since: datetime) -> None:
    if _on:
        _kid(WAKE_TO_EFFECT, workflow).observe(max(0.0, time.time() - since.timestamp()))


def timer_fired(count: int) -> None:
    if _on:
        TIMER_WAKES.inc(count)


def swept(stage: str) -> None:
    if _on:
        _kid(SWEPT, stage).inc()


def relay_published(count: int) -> None:
    if _on:
        RELAY_RECORDS.inc(count)


def quarantined(reason: str) -> None:
    """A task quarantined (its marker newly set), by the marker's reason."""
    if _on:
        _kid(QUARANTINES, quarantine_class(reason)).inc()


def event_refused(reason: str) -> None:
    """A signed event the gate refused, writing nothing but its receipt (`reason`: the receipt's)."""
    if _on:
        _kid(EVENTS_REFUSED, reason_class(reason)).inc()


def wrong_tenant(role: str) -> None:
    """A signed event whose signer's tenant is not the tenant of the task or wait it reached."""
    if _on:
        _kid(WRONG_TENANT, role).inc()


def unexpected_tool(app: str, tool: str | None) -> None:
    """A proposal naming a tool the task's stage does not offer; `tool` None: one the app lacks
    (its name is the model's text, so the label says `unknown`)."""
    if _on:
        _kid(UNEXPECTED_TOOLS, app, tool or "unknown").inc()


def ingress_answered(route: str, status: int, started: float) -> None:
    """An HTTP request the ingress answered (route: its template, never the path as sent), timed
    from `started` (clock()). Counted only while the door serves its metrics (`--metrics-port`)."""
    if not _on:
        return
    _kid(INGRESS_REQUESTS, route, str(status)).inc()
    _kid(INGRESS_SECONDS, route).observe(time.perf_counter() - started)


def tool_outcome(result: Any) -> str:
    """What a call_once result (consumers/executor/steps.py) was: a mapping is an answer (one that
    comes later carries the pending marker), a string why it failed for good, else its type."""
    if isinstance(result, Mapping):
        return "pending" if PENDING_MARK in result else "ok"
    if isinstance(result, str):
        return "refused"
    return type(result).__name__.lower()


def tool_calls(call_once: F) -> F:
    """Decorates executor_steps.call_once(tool, op_key, attempt, lease): each call counted by tool and
    outcome, and timed."""

    @functools.wraps(call_once)
    def counted(tool: Any, *args: Any, **kwargs: Any) -> Any:
        if not _on:
            return call_once(tool, *args, **kwargs)
        started, outcome = time.perf_counter(), "error"
        try:
            result = call_once(tool, *args, **kwargs)
            outcome = tool_outcome(result)
            return result
        except Exception as exc:
            outcome = "fenced" if type(exc).__name__ == "LeaseLost" else "error"
            raise
        finally:
            _kid(TOOL_CALLS, tool.name, outcome).inc()
            _kid(TOOL_SECONDS, tool.name).observe(time.perf_counter() - started)

    return counted  # type: ignore[return-value]


class _TimedModel:
    """A proposer's model whose every propose() is timed and counted by outcome."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name: str = model.name

    def propose(self, window: dict[str, Any]) -> Any:
        started, outcome = time.perf_counter(), "error"
        try:
            proposal = self.model.propose(window)
            outcome = "failed" if proposal.failed else "unusable" if proposal.unusable else "ok"
            return proposal
        finally:
            _kid(MODEL_CALLS, self.name, outcome).inc()
            _kid(MODEL_SECONDS, self.name).observe(time.perf_counter() - started)


def timed_models(make: F) -> F:
    """Decorates models.make_model: the model it makes is timed, when metrics are on."""

    @functools.wraps(make)
    def made(*args: Any, **kwargs: Any) -> Any:
        model = make(*args, **kwargs)
        return _TimedModel(model) if _on else model

    return made  # type: ignore[return-value]


def model_usage(model: str, usage: Any) -> None:
    """A chat completion's `usage` object: its prompt and completion tokens (or its total alone)."""
    if not _on or not isinstance(usage, dict):
        return
    parts = {k: usage.get(f"{k}_tokens") for k in ("prompt", "completion")}
    if not any(isinstance(v, int) for v in parts.values()):
        parts = {"total": usage.get("total_tokens")}
    for kind, count in parts.items():
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            _kid(MODEL_TOKENS, model, kind).inc(count)


def consumer_stats(role: str) -> dict[str, Any]:
    """What a role's group consumer adds to its config: librdkafka's statistics every few seconds,
    read for each partition's consumer lag. Nothing while metrics are off (the statistics cost a
    JSON document per interval)."""
    if not _on:
        return {}
    shown: set[tuple[str, str]] = set()

    def on_stats(raw: str) -> None:
        try:
            now = lags(orjson.loads(raw))
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
            return
        for gone in shown - now.keys():
            CONSUMER_LAG.remove(role, *gone)
            _kids.pop((id(CONSUMER_LAG), (role, *gone)), None)
        for (topic, partition), lag in now.items():
            _kid(CONSUMER_LAG, role, topic, partition).set(lag)
        shown.clear()
        shown.update(now)

    return {"statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": on_stats}
