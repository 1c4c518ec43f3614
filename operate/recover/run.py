"""`wakeful recover`: rebuild a lost Redis from Kafka, and keep authority's copy on Kafka (D70).

Order: refuse while workers hold leases or report alive (unless forced); put back authority from
the newest sealed copy on wakeful.authority; read wakeful.log from its first offset twice (where
each task's records end and how far back the log vouches for the role topics, then the fold:
state/rebuild_ends.py, state/rebuild.py), restoring every task Redis lacks or holds behind the log
(state/restore.py) in batches as soon as its records are all folded, saying how far it got; then
re-drive what Redis had applied and the log lacks (D87: operate/recover/redrive.py,
proposals.py). Run twice, the second run restores nothing: every task is left.

Only what the relay signed is folded (D92): a message without its Ed25519 log signature is named
and skipped, and a tombstone that the purge's rule could not have made (workflow/tombstones.py) is
refused, its task kept. Either ends the run with an error, after everything else is restored.

What the log does not hold is named in the report, never passed over: memory records, evidence
documents (each task's excerpt of them is restored), receipts of events refused without a change,
and wakes a freeze held.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from wakeful.authority import backup
from wakeful.authority.schedule_store import ScheduleStore
from wakeful.consumers.executor import steps as executor_steps
from wakeful.consumers.kafka.producing import producer_config
from wakeful.consumers.kafka.switch_acks import LIVE_S
from wakeful.core import index_signing, kafka_auth, kafka_rights, topics
from wakeful.core.errors import DecodeError, IntegrityError, KeyringError, WakefulError
from wakeful.core.retry import FunctionsMissing
from wakeful.core.settings import Settings
from wakeful.operate import purge, reach
from wakeful.operate.recover import proposals as redrive_proposals
from wakeful.operate.recover import redrive
from wakeful.operate.recover.scan import Scan
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.schedule import ScheduleRecord
from wakeful.sdk.app import App
from wakeful.state import keys, library
from wakeful.state.restore import Restored, Restorer
from wakeful.state.seal import Sealer
from wakeful.workflow import engine, schedules, tombstones
from wakeful.workflow.stuck import PARKED

NOT_ON_THE_LOG = (
    "memory records (wk:mem:*): re-verify and re-remember what the tasks need",
    "evidence (wk:{T}:evidence, wk:ev:*): kept off a log that outlives its erasure (memory forget)",
    "receipts of events refused without a change, and door dedupe marks (wk:seen:*, a 2-hour TTL)",
    "wakes held by a freeze or a limit (wk:{T}:held): re-driven from wakeful.wake while it keeps them",
    "the in-flight limits' counts (wk:fair:*): tasks open before the loss are not counted",
    "the record of dead-letter replays (wk:dlq:replays)",
    "model token budgets spent (wk:{T}:spent, wk:tenant:*:spent): counted again from zero",
)

Say = Callable[[str], None]


@dataclass
class Report:
    messages: int = 0
    records: int = 0
    duplicates: int = 0
    purged: int = 0
    refused: list[str] = field(default_factory=list)
    unsigned: int = 0  # log messages without the relay's log signature: not folded (D92)
    unsigned_named: list[str] = field(default_factory=list)
    unsigned_before_d72: int = 0  # written before the relay signed the log: not folded, no error
    tombstones_refused: int = 0  # tombstones a purge could not have made: their tasks kept (D92)
    tombstones_named: list[str] = field(default_factory=list)
    tasks: int = 0
    done: Restored = field(default_factory=Restored)
    authority_written: list[str] = field(default_factory=list)
    authority_left: list[str] = field(default_factory=list)
    authority_copy: str = "none on wakeful.authority"
    redrive_plan: redrive.Plan = field(default_factory=redrive.Plan)  # D87
    redriven: list[str] = field(default_factory=list)
    proposals: list[str] = field(default_factory=list)  # published again (redrive_proposals)
    schedules_marked: dict[str, str] = field(default_factory=dict)  # newest tick per schedule, set again

    def as_dict(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "records": self.records,
            "duplicates": self.duplicates,
            "purged": self.purged,
            "refused_messages": self.refused,
            "unsigned_messages": {
                "count": self.unsigned,
                "named": self.unsigned_named,
                "before_the_log_was_signed": self.unsigned_before_d72,
            },
            "tombstones_refused": {"count": self.tombstones_refused, "named": self.tombstones_named},
            "tasks_on_log": self.tasks,
            "restored": len(self.done.restored),
            "woken": len(self.done.woken),
            "left": self.done.left,
            "failed": self.done.failed,
            "index_skipped": self.done.index_skipped,
            "authority": {
                "copy": self.authority_copy,
                "written": self.authority_written,
                "left": self.authority_left,
            },
            "not_on_the_log": list(NOT_ON_THE_LOG),
            "schedules_newest_tick": self.schedules_marked,
            "redrive": self.redrive_plan.as_dict()
            | {"wakes_published": self.redriven, "proposals_published": self.proposals},
        }


def busy(admin: redis.Redis) -> list[str]:
    """Why recovery must not run now: leases held, or roles that reported alive lately."""
    found = [k.decode() for k in admin.scan_iter(match=keys.PATTERN_LEASE, count=1000)]
    why = [f"{len(found)} task lease(s) held, e.g. {found[0]}"] if found else []
    now_ms = int(time.time() * 1000)
    live: dict[bytes, bytes] = admin.hgetall(keys.LIVE)  # type: ignore[assignment]
    for name, raw in live.items():
        parts = raw.decode().split()
        if len(parts) == 2 and parts[1].isdigit() and now_ms - int(parts[1]) < LIVE_S * 1000:
            why.append(f"worker {name.decode()} reported alive {now_ms - int(parts[1])} ms ago")
    return why


def recover(
    settings: Settings, app: App, admin: redis.Redis, sealer: Sealer, say: Say, *, force: bool
) -> Report:
    reasons = busy(admin)
    if reasons and not force:
        raise WakefulError(
            "workers are running: " + "; ".join(reasons[:5]) + ". Stop them (a restored task must not "
            "be written under a worker's feet), or pass --force if these are left from before the loss"
        )
    try:  # the task index is written through the library: a new Redis needs `admin acl --apply` first
        library.check(admin, settings)
    except FunctionsMissing as exc:
        raise WakefulError(str(exc)) from exc
    report = Report()
    _authority(settings, admin, sealer, report, say)
    scan = Scan(say, tombstone_rule(settings, app, datetime.now(UTC)))
    scan.find_ends(settings)
    # Where the log vouches for nothing, and the proposals from there, before any task is restored:
    # a task whose own proposal is published again is not woken (D87).
    report.redrive_plan = redrive.plan(settings, scan.coverage)
    held = redrive_proposals.read(settings, report.redrive_plan.starts)
    scan.among = redrive.named(settings, report.redrive_plan)
    answered: dict[str, list[redrive_proposals.Held]] = {}
    # signed with the relay's index key when this host holds it; else the relay signs them at its
    # next sweep: the mark that it did (keys.INDEX_SIGNED, D93) is cleared, also where Redis kept it
    signer = index_signing.load_signer(settings) if index_signing.has_signer(settings) else None
    if signer is None:
        admin.delete(keys.INDEX_SIGNED)
    restorer = Restorer(admin, sealer, _wakes(app, held, answered), datetime.now(UTC), signer)
    for tasks in scan.folds(settings):
        report.done.merge(restorer.restore(tasks))
        for task in tasks:
            report.refused += [f"task {task.task_id}: {problem}" for problem in task.problems]
        say(
            f"recover: restored {len(report.done.restored)}, left {len(report.done.left)}, "
            f"failed {len(report.done.failed)} of {len(scan.ends)} tasks"
        )
    report.schedules_marked = _schedule_marks(admin, [*report.done.restored, *report.done.left])
    fold, read = scan.fold, scan.read
    report.messages, report.duplicates = read.messages, fold.duplicates
    report.records = fold.records + read.passed_over
    report.refused[:0] = read.refused + scan.first.unvouched + fold.problems
    report.tasks, report.purged = len(scan.ends), fold.purged
    report.unsigned, report.unsigned_named = scan.first.unsigned, scan.first.unsigned_named
    report.unsigned_before_d72 = scan.first.unsigned_before_d72
    refused = scan.ends.refused
    report.tombstones_refused, report.tombstones_named = len(refused), [w for w in refused.values() if w]
    # Once the inbox marks that dedupe what the log reflects are back in Redis (D87).
    report.redriven = redrive.republish(settings, report.redrive_plan, scan.purged, say)
    report.proposals = redrive_proposals.publish(settings, [h for hs in answered.values() for h in hs], say)
    return report


def tombstone_rule(settings: Settings, app: App, now: datetime) -> tombstones.PurgeRule:
    """The rule a tombstone on the log is held to (D92): the one `wakeful task purge` applies for
    `app` on this stack, the door's replay window its floor."""
    return tombstones.purge_rule(app, purge.replay_window(settings), now)


def _wakes(
    app: App, held: dict[str, list[redrive_proposals.Held]], answered: dict[str, list[redrive_proposals.Held]]
) -> Callable[[Checkpoint], bool]:
    """Whether a restored task is woken; one that proposals `held` answer as it is gets them again
    instead (put in `answered`)."""

    def wakes(cp: Checkpoint) -> bool:
        fit = [h for h in held.get(cp.task_id, ()) if executor_steps.unanswered(app, cp, h.env) is None]
        if fit:
            answered[cp.task_id] = fit
            return False
        if cp.stage in PARKED or cp.execution.pending_waits:  # a cancelling task is woken: its undos are owed
            return False
        try:
            return not engine.terminal(engine.workflow_of(app, cp), cp.stage)
        except engine.UnknownWorkflow:
            return False  # not this app's: its own fleet's recovery wakes it

    return wakes


def _schedule_marks(admin: redis.Redis, tasks: list[str]) -> dict[str, str]:
    """Each schedule's newest published tick set again from the tasks its ticks started (moved
    forward only): a tick before it is not published twice (D104)."""
    names = {n for n, r in ScheduleStore(admin).all().items() if isinstance(r, ScheduleRecord)}
    newest: dict[str, datetime] = {}
    for task in tasks:
        found = schedules.tick_of(task, names)
        if found is not None:
            newest[found[0]] = max(newest.get(found[0], found[1]), found[1])
    if newest:
        admin.zadd(keys.SCHEDULE_FIRED, {n: int(t.timestamp() * 1000) for n, t in newest.items()}, gt=True)
    return {n: t.isoformat() for n, t in sorted(newest.items())}


def _authority(settings: Settings, admin: redis.Redis, sealer: Sealer, report: Report, say: Say) -> None:
    newest = newest_copy(settings)
    if newest is None:
        say("recover: no copy of authority on wakeful.authority: authority is left as Redis has it")
        return
    try:
        at_ms, found = backup.unseal(sealer, newest)
    except (IntegrityError, DecodeError, KeyringError) as exc:
        report.authority_copy = f"refused: {exc}"
        say(f"recover: the newest authority copy does not verify, nothing of it written: {exc}")
        return
    report.authority_copy = datetime.fromtimestamp(at_ms / 1000, UTC).isoformat()
    report.authority_written, report.authority_left = backup.put_back(admin, found)
    say(
        f"recover: authority copy of {report.authority_copy}: {len(report.authority_written)} keys "
        f"written, {len(report.authority_left)} left as Redis has them"
    )


def newest_copy(settings: Settings) -> bytes | None:
    """The last message on wakeful.authority, or None."""
    config = kafka_auth.client_config(settings, kafka_rights.ADMIN) | {
        "group.id": f"wakeful-authority-reader-{time.time_ns()}",
        "enable.auto.commit": False,
    }
    consumer = Consumer(config)
    try:
        part = TopicPartition(topics.AUTHORITY, 0)
        low, high = consumer.get_watermark_offsets(part, timeout=30)
        if high <= low:
            return None
        consumer.assign([TopicPartition(topics.AUTHORITY, 0, high - 1)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for msg in consumer.consume(10, 1.0):
                if msg.error() is None and msg.offset() == high - 1:
                    return msg.value()
        raise KafkaException(f"{topics.AUTHORITY} did not give its offset {high - 1} within 30 s")
    finally:
        consumer.close()


def journal_authority(
    settings: Settings, admin: redis.Redis, sealer: Sealer, *, always: bool = False
) -> bool:
    """Publish a sealed copy of authority when it changed since the last one (or `always`); True
    when one was published. Acknowledged by the broker (acks=all) before the digest is kept."""
    found = backup.copy(admin)
    digest = backup.digest(found)
    kept: bytes | None = admin.get(keys.JOURNAL_AUTHORITY)  # type: ignore[assignment]
    if not always and (kept or b"").decode() == digest:
        return False
    reach.require_kafka(settings)  # in one line, not after a producer's time-out
    producer = Producer(producer_config(settings, kafka_rights.ADMIN))
    failed: list[Any] = []
    blob = backup.seal(sealer, found, int(time.time() * 1000))
    producer.produce(
        topics.AUTHORITY, key=b"authority", value=blob, on_delivery=lambda e, _m: failed.append(e)
    )
    if producer.flush(30) != 0 or any(e is not None for e in failed):
        raise WakefulError(f"the authority copy was not acknowledged by Kafka: {failed}; run it again")
    admin.set(keys.JOURNAL_AUTHORITY, digest)
    return True
