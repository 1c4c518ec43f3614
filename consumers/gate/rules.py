"""The gate's decisions as pure functions: (wake, verified state, live authority, now) -> decision.

`misaddressed()` re-checks a wake's signed event behind the door; `decide()` says what one wake does
to one task. Neither reads or writes anything: the gate loads, calls them inside its
compare-and-swap, and writes what they return, so every rule here is tested without Kafka or Redis.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from wakeful.authority import freezes
from wakeful.authority.freezes import Freeze
from wakeful.authority.snapshot import Snapshot
from wakeful.core import ids
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.events import FUTURE_SKEW, Envelope, SignedEvent
from wakeful.sdk.app import App
from wakeful.sdk.workflow import CANCELLED, CLOSED, NEEDS_REVIEW, QUARANTINED, Refuse
from wakeful.state.store import Keep
from wakeful.workflow import compat, engine, revoked, stuck, switches, wakes


@dataclass(frozen=True)
class Stranger:
    """Gate 2 failed: the task is another tenant's, so to the event's signer it does not exist."""


@dataclass(frozen=True)
class Frozen:
    """A freeze holds the task (authority/freezes.py): the wake is kept for when it is thawed."""

    freeze: Freeze


@dataclass(frozen=True)
class Incompatible:
    """Gate 4 failed: the task started under versions the declared rules do not carry forward."""

    detail: str


# Kinds the runtime decides without handing the workflow a Context: a create (no task yet), an
# approval and a run. Every other kind the gate applies (a reopen, the app's own change requests)
# is decided with ctx.started, the op keys whose effect has begun.
WITHOUT_CONTEXT = frozenset({events.CREATE, events.APPROVE, events.RUN})


def needs_started(kind: str) -> bool:
    """Whether the gate reads the task's action log for an event of `kind` (ctx.started)."""
    return kind not in WITHOUT_CONTEXT


# What one wake does to one task: a move (a new checkpoint to write, with any evidence it
# attached); the task for review (written, and the sender's receipt says why); a refusal that
# writes nothing but the sender's receipt; a stranger's event, answered as for no task; a
# quarantine; a wake held by a freeze; or None (nothing to do: a deadline not due, "run" on a task
# that may run).
WakeRuling = engine.Moved | engine.ForReview | Refuse | Stranger | Incompatible | Frozen | None


def decide(
    app: App,
    cp: Checkpoint,
    event: SignedEvent | None,
    principal: str,
    *,
    tenant: str,
    auth: Snapshot,
    now: datetime,
    started: frozenset[str] = frozenset(),
    recorded: Mapping[str, Mapping[str, Any]] | None = None,
) -> WakeRuling:
    """Gates 2, 4 and 5 for one wake on the task as read and verified (gate 3): the tenant, a
    freeze, the versions, then the runtime's rules and the workflow's. event None is a deadline
    wake; tenant is the event's signer's; started holds the op keys whose side effect has begun
    (money may have moved); recorded, read from the same action log, the outcome of each call that
    succeeded (pending.outcomes): a reopen waits again on a call whose answer comes later."""
    if event is not None and cp.security.tenant != tenant:
        # Another tenant's task (one made before the namespaces, D52, or reached through a
        # correlation id stored before its tenant was) is, to this signer, no task at all.
        return Stranger()
    if cp.stage in (CLOSED, QUARANTINED, CANCELLED):
        return Refuse(f"task is {cp.stage}; it accepts no more events")
    freeze = freezes.holding(auth.frozen, app.name, cp.security.tenant, cp.task_id)
    if freeze is not None:  # the kill path: no new step, and the wake is kept, not refused
        return Frozen(freeze)
    versioned = compat.workflow_version(app, cp, auth)  # gate 4: the workflow version it runs
    if isinstance(versioned, str):
        return Incompatible(versioned)
    if engine.terminal(engine.workflow_of(app, versioned), versioned.stage):
        return Refuse(f"task is {versioned.stage}; it accepts no more events")
    checked = compat.check_app(app, versioned, auth)
    if isinstance(checked, str):
        return Incompatible(checked)
    if event is not None and event.kind == events.REOPEN:  # a person looked: revocations cleared
        heard = wakes.Heard(event.kind, event.payload, principal, event.correlation_id)
        reopened = wakes.on_event(app, checked, heard, auth=auth, now=now, started=started, recorded=recorded)
        if isinstance(reopened, engine.Moved):
            cleared = revoked.cleared(checked, reopened.checkpoint, auth)
            reopened = engine.Moved(cleared, reopened.evidence, reopened.remember)
        return off_parked(app, checked, reopened, auth)
    parked = revoked.parks(app, checked, auth)
    if parked is not None and checked.stage != NEEDS_REVIEW:  # the app's rule for a revoked signer
        return engine.ForReview(engine.review(checked, parked), parked)
    if event is None:
        due = wakes.on_deadline(app, checked, now)
        if due is not None:
            return off_parked(app, checked, engine.Moved(due, {}), auth)
        # Woken with nothing due and nothing that could move it (the timer's sweep found it so):
        # a person, never a task left as it is (D85).
        nothing = stuck.stranded(app, checked, now)
        if nothing:
            return engine.ForReview(engine.review(checked, nothing), nothing)
        return off_parked(app, checked, None, auth)
    heard = wakes.Heard(event.kind, event.payload, principal, event.correlation_id)
    ruled = wakes.on_event(app, checked, heard, auth=auth, now=now, started=started)
    return off_parked(app, checked, ruled, auth)


def off_parked(app: App, cp: Checkpoint, ruled: WakeRuling, auth: Snapshot) -> WakeRuling:
    """`ruled`, unless it would have the model asked at a stage whose every tool is switched off
    (switches.stage_off; D117): then the task is parked for a person, as a proposal of a disabled
    tool would park it, with no model call. A move is parked_move()'s; a wake that changed nothing
    (`cp` as judged) parks the task."""
    if isinstance(ruled, engine.Moved):
        return parked_move(app, ruled, auth)
    if ruled is None and (off := switches.stage_off(app, cp, auth)) is not None:
        return engine.ForReview(engine.review(cp, off.reason), off.reason)
    return ruled


def parked_move(app: App, moved: engine.Moved, auth: Snapshot) -> engine.Moved:
    """`moved`, or, where it lands at a stage whose every tool is off, the same move parked for a
    person on landing: its event is applied, its evidence and memory kept."""
    off = switches.stage_off(app, moved.checkpoint, auth)
    if off is None:
        return moved
    return engine.Moved(engine.review(moved.checkpoint, off.reason), moved.evidence, moved.remember)


def written(ruling: WakeRuling) -> Checkpoint | Keep:
    """What the change writes for a ruling: the checkpoint of a move or of a task for review;
    for any other, nothing."""
    if isinstance(ruling, engine.Moved | engine.ForReview):
        return ruling.checkpoint
    return Keep()


def misaddressed(
    event: SignedEvent,
    envelope: Envelope,
    verified: bool,
    kinds: frozenset[str],
    *,
    tenant: str,
    max_age: timedelta,
    keep: timedelta,
    appended: datetime | None,
    issued: datetime | None = None,
) -> str | None:
    """Why a wake must not be trusted, or None: a signed event only authorizes what it names, and
    the door's verdict the wake carries (the moment its event reached Kafka, against which the door
    judged it) must be one the door could give: the event issued within the max age of it, and the
    verdict no later than the broker's append of the wake (`appended`) nor older than the door can
    read an event (`keep`, core/topics.event_keep_s). How long the wake then waited for the gate
    does not count (D84). `appended` None: a wake replayed from the task's held list, judged when it
    came. `issued`: when the operator's replay that vouches for the event was signed (D71), held to
    the max age in the event's place; None for an event as sent."""
    if not verified:
        return f"wake carries an event whose signature does not verify ({event.key_id})"
    if event.event_id != envelope.message_id:
        return "wake message id does not match its event"
    if event.task_id is not None and envelope.task_id not in addressed(event, tenant):
        return f"wake for task {envelope.task_id} carries an event signed for task {event.task_id}"
    if event.kind == events.APPROVE and not (event.task_id or event.correlation_id):
        return "wake carries an approval that names neither its task nor its wait"
    if event.kind not in kinds:
        return f"key {event.key_id} may not send {event.kind}"
    judged = judged_at(envelope)
    if judged is None:
        return "wake does not say when the door judged its event"
    issued = issued or event.issued_at
    issued = issued if issued.tzinfo else issued.replace(tzinfo=UTC)
    if issued < judged - max_age or issued > judged + FUTURE_SKEW:
        return f"wake carries an event issued {issued.isoformat()}: the door refuses it at {judged:%H:%M:%S}"
    if appended is not None and (judged > appended + FUTURE_SKEW or judged < appended - keep):
        return (
            f"wake judged at {judged.isoformat()} but appended at {appended.isoformat()}: "
            "no verdict the door can have given"
        )
    return None


def addressed(event: SignedEvent, tenant: str) -> tuple[str, ...]:
    """The runtime's ids of the task an event names, as its signer's tenant names it: its own
    namespace's, and for an event other than a create the id as sent, which a task of that tenant
    made before the namespaces still has (inbound finds it; the tenant check judges it)."""
    assert event.task_id is not None
    scoped = ids.task_in(tenant, event.task_id)
    return (scoped,) if event.kind == events.CREATE else (scoped, event.task_id)


def judged_at(envelope: Envelope) -> datetime | None:
    """When the door judged the wake's event (inbound writes it; its signature covers it)."""
    raw = envelope.payload.get("judged_at")
    try:
        when = datetime.fromisoformat(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return when if when is None or when.tzinfo else when.replace(tzinfo=UTC)
