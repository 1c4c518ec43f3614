"""`wakeful bench-retention`: what closed tasks cost Redis, and what `wakeful task purge` gives back.

It seeds N closed refund tasks of a tenant of its own with the runtime's own commands
(state/last_step.py's change, sealed, with its counter, inbox mark, receipt and outbox record; the
action log's intent and outcome; the relay's trim and index function), as a refund through an
approval leaves them: three changes (created waiting for approval, approved, closed by its
effect), a correlation id, two receipts. Their clock is RETENTION + 30 days in the past, so a purge
takes them all. It reads `INFO memory` used_memory before and after, and after the purge (before
and after the relay has put the tombstones on wakeful.log and their outboxes are dropped).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import redis
from confluent_kafka import Producer

from wakeful.consumers.kafka import wiring
from wakeful.consumers.kafka.producing import producer_config
from wakeful.consumers.relay.main import Relay
from wakeful.core import ids
from wakeful.core.log import Log
from wakeful.core.log_signing import load_log_signer
from wakeful.core.provenance import load_signer
from wakeful.core.settings import Settings
from wakeful.operate import purge
from wakeful.schemas.approval import Approval
from wakeful.schemas.changelog import action_record
from wakeful.schemas.checkpoint import BusinessState, Checkpoint, PendingWait, SecurityScope, VersionStamps
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.sdk.app import DEFAULT_APP, App, load_app
from wakeful.state import acl, functions, index, keys, last_step
from wakeful.state import purge as state_purge
from wakeful.state.index import Index
from wakeful.state.outbox import TRIM, Outbox
from wakeful.state.pinned import Pinned
from wakeful.state.seal import Keyring, Sealer

CHUNK = 250  # tasks per round trip while seeding
Say = Callable[[str], None]


def _history(app: App, task_id: str, tenant: str, at: datetime) -> list[tuple[Checkpoint, str, str | None]]:
    """A refund through an approval, as its three changes: (checkpoint, message id, the receipt's
    event id or None)."""
    outside = ids.named_by(tenant, task_id)
    base = Checkpoint(
        task_id=task_id,
        business=BusinessState(stage="awaiting_approval", data={"amount": 250_000, "currency": "EUR"}),
        security=SecurityScope(tenant=tenant, principal_ref="principal:svc-refunds"),
        versions=VersionStamps(
            policy="refund-policy-1",
            tool_catalog=app.catalog,
            agent_id="refund-agent",
            state_version=0,
        ),
        updated_at=at,
        created_at=at,
    )
    wait = PendingWait(
        wait_for="approval",
        correlation_id=f"appr-{outside}",
        bound_to_version=1,
        allowed_signers=("role:approver",),
        deadline=at + timedelta(days=2),
        on_deadline="escalate:ops-lead",
        then="ready",
    )
    waiting = base.model_copy(
        update={"execution": base.execution.model_copy(update={"pending_waits": (wait,)})}
    )
    approval = Approval(
        object="refund",
        object_version=1,
        object_digest="9" * 64,
        approver_ref="principal:alice",
        scope="refund.execute",
        expires_at=at + timedelta(days=1),
    )
    ready = base.model_copy(
        update={"business": base.business.model_copy(update={"stage": "ready", "approval": approval})}
    )
    closed = ready.model_copy(
        update={
            "business": ready.business.model_copy(
                update={"stage": "closed", "approval": approval.model_copy(update={"consumed": True})}
            ),
            "external_refs": {"ledger_entry": f"le-{uuid.uuid4().hex}"},
        }
    )
    create, approve = f"ev-{uuid.uuid4().hex}", f"ev-{uuid.uuid4().hex}"
    return [
        (waiting, keys.event_identity("key-svc-refunds", create), create),
        (ready, keys.event_identity("key-alice", approve), approve),
        (closed, keys.runtime_id("close", f"REFUND:{task_id}:v1"), None),
    ]


def _task_commands(
    app: App, sealer: Sealer, task_id: str, tenant: str, at: datetime
) -> list[tuple[Any, ...]]:
    """Every command the runtime sends for the task, relay and trim aside."""
    out: list[tuple[Any, ...]] = []
    shown = wiring.shows(app)  # what the task shows, on each record as the runtime's store writes it
    for version, (cp, message_id, event) in enumerate(_history(app, task_id, tenant, at), start=1):
        new = last_step.stamp(cp, version, 1 if version == 3 else 0, at)
        key_id = message_id.split(":")[1]
        said = orjson.dumps(
            {"status": "accepted", "reason": f"task is {cp.stage}", "task_id": task_id, "by": "gate",
             "stage": cp.stage, "version": 1, "state_version": version}
        )  # fmt: skip
        receipt = (
            [("SET", keys.receipt(event, task_id, key_id=key_id), said, "EX", keys.RECEIPT_TTL_S)]
            if event
            else []
        )
        out += last_step.commands(
            sealer, new, message_id, {"by": "bench"}, also=receipt, before=None, shown=shown
        )
        out += last_step.wait_writes(new)[1:]  # its correlation id (the deadline has fired since)
        if version == 2:  # the effect, intent first: the action log and its records
            op = f"REFUND:{task_id}:v1"
            out.append(("INCR", keys.fence(task_id)))
            for status in (ActionStatus.IN_FLIGHT, ActionStatus.SUCCEEDED):
                entry = ActionLogEntry(
                    op_key=op, task_id=task_id, status=status, fence=1, started_at=at, tool="refund",
                    args={"task_id": task_id, "amount": 250_000, "currency": "EUR"},
                    result={"ledger_entry": "le-1"} if status == ActionStatus.SUCCEEDED else None,
                    finished_at=at if status == ActionStatus.SUCCEEDED else None,
                )  # fmt: skip
                logged = action_record(entry)
                out.append(("HSET", keys.ops(task_id), op, entry.encode()))
                out.append(
                    (
                        "XADD",
                        keys.outbox(task_id),
                        "*",
                        "id",
                        logged.record_id,
                        "r",
                        logged.encode(),
                        "k",
                        "a",
                    )
                )
    return out


def seed(
    client: redis.Redis, sealer: Sealer, tenant: str, span: range, at: datetime, *, say: Say
) -> list[str]:
    """Seed closed refund tasks number `span` of `tenant`, as the runtime and its relay leave them."""
    made: list[str] = []
    count = span.stop
    refund = load_app(DEFAULT_APP)
    said = time.monotonic()
    with Pinned(client, keys.DEADLINES) as conn:
        for start in range(span.start, span.stop, CHUNK):
            chunk = [f"{tenant}.r-{n}" for n in range(start, min(count, start + CHUNK))]
            commands = [c for t in chunk for c in _task_commands(refund, sealer, t, tenant, at)]
            conn.batch(commands)
            _relay(client, conn, chunk)
            made += chunk
            if time.monotonic() - said >= 5:
                say(f"  seeded {span.start + len(made)}/{count} ...")
                said = time.monotonic()
    return made


def _relay(client: redis.Redis, conn: Pinned, chunk: list[str]) -> None:
    """What the relay does once the broker has them: the index from the last change, then the trim
    (which deletes the outbox it empties)."""
    entries = conn.batch([("XRANGE", keys.outbox(t), "-", "+") for t in chunk])
    commands: list[tuple[Any, ...]] = []
    for task_id, found in zip(chunk, entries, strict=True):
        flat = [dict(zip(fields[::2], fields[1::2], strict=True)) for _, fields in found]  # raw replies
        changes = [fields[b"r"] for fields in flat if b"k" not in fields]
        commands.append(index.command(changes[-1]))
        commands.append(functions.command(TRIM, [keys.outbox(task_id)], [entry_id for entry_id, _ in found]))
    commands.append(("SREM", keys.OUTBOX_DIRTY, *chunk))
    conn.batch(commands)


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def breakdown(client: redis.Redis, task_id: str, tenant: str) -> dict[str, int]:
    """Bytes (MEMORY USAGE) of each key one seeded task holds, by kind."""
    out: dict[str, int] = {}
    for key in client.scan_iter(match=f"wk:{{{task_id}}}:*", count=1000):
        kind = key.decode().split("}:", 1)[1].split(":", 1)[0]
        out[kind] = out.get(kind, 0) + int(client.memory_usage(key, samples=0) or 0)
    out["corr"] = int(client.memory_usage(keys.corr(f"appr-{ids.named_by(tenant, task_id)}"), samples=0) or 0)
    summary = client.hget(keys.index_tasks(tenant), task_id) or b""
    out["index (summary bytes)"] = len(summary)
    return out


def run(settings: Settings, closed: int, say: Say, *, purge_too: bool = True) -> dict[str, Any]:
    """Seed `closed` tasks in two halves (used_memory after each: bytes per task at both sizes shows
    whether it is linear), then purge them and drain their tombstones."""
    client = acl.connect(settings, "admin")
    sealer = Sealer(Keyring.load(settings.keyring))
    tenant, now = f"bench{uuid.uuid4().hex[:8]}", datetime.now(UTC)
    refund = load_app(DEFAULT_APP)  # the bundled refund app: its tasks are what is seeded
    at = now - refund.retention.closed_tasks - timedelta(days=30)
    half = closed // 2
    base = used(client)
    started = time.monotonic()
    made = seed(client, sealer, tenant, range(half), at, say=say)
    at_half = used(client)
    made += seed(client, sealer, tenant, range(half, closed), at, say=say)
    at_full = used(client)
    seeded_s = time.monotonic() - started
    per_half = (at_half - base) / max(half, 1)
    per_task = (at_full - base) / max(closed, 1)
    out: dict[str, Any] = {
        "closed": closed,
        "redis": client.info("server")["redis_version"],
        "stream_node_max_bytes": int(
            str(client.config_get("stream-node-max-bytes")["stream-node-max-bytes"])
        ),
        "seeded_per_s": round(closed / seeded_s),
        "bytes_per_task_at_half": round(per_half),
        "bytes_per_task": round(per_task),
        "gb_per_million": round(per_task * 1_000_000 / 1e9, 2),
        "per_key": breakdown(client, made[0], tenant) if made else {},
    }
    if purge_too:
        say(f"purging {closed} tasks ...")
        started = time.monotonic()
        report = purge.run(client, refund, now, now, dry_run=False, tenant=tenant, wait_s=0, say=say)
        out["purged"] = report.purged
        out["purged_per_s"] = round(report.purged / max(time.monotonic() - started, 1e-9))
        out["bytes_left_per_task_before_relay"] = round((used(client) - base) / max(closed, 1))
        say("relaying the tombstones to wakeful.log ...")
        _drain(settings, client)
        out["bytes_left_per_task"] = round((used(client) - base) / max(closed, 1))
    return out


def _drain(settings: Settings, client: redis.Redis) -> None:
    """Run a relay here until every tombstone is on wakeful.log, then drop the drained outboxes."""
    relay_client = acl.connect(settings, "relay")
    producer = Producer(producer_config(settings, "relay") | {"linger.ms": 5})
    relay = Relay(
        Outbox(relay_client),
        producer,
        Log(role="relay"),
        signer=load_signer(settings, "relay"),
        log_signer=load_log_signer(settings),  # signed as the relay signs the log: an audit reads it
        index=Index(relay_client),
    )
    while client.scard(keys.OUTBOX_DIRTY):
        relay.run_once()
    state_purge.drop_outboxes(client)


def render(r: dict[str, Any]) -> str:
    lines = [
        f"closed tasks    : {r['closed']} refund tasks through an approval (Redis {r['redis']}, "
        f"stream-node-max-bytes {r['stream_node_max_bytes']}), seeded at {r['seeded_per_s']}/s",
        f"per closed task : {r['bytes_per_task_at_half']} bytes at {r['closed'] // 2}, "
        f"{r['bytes_per_task']} bytes at {r['closed']} (used_memory)",
        f"1M closed tasks : {r['gb_per_million']} GB",
        "one task's keys : " + ", ".join(f"{k} {v}" for k, v in sorted(r["per_key"].items())),
    ]
    if "purged" in r:
        lines += [
            f"purge           : {r['purged']} tasks at {r['purged_per_s']}/s; left per task "
            f"{r['bytes_left_per_task_before_relay']} bytes (tombstones waiting), "
            f"{r['bytes_left_per_task']} bytes once on wakeful.log",
        ]
    return "\n".join(lines)
