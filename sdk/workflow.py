"""A workflow: data plus pure decision functions. No I/O and no clock of its own.

The runtime loads the task, verifies the event and the live authority, and hands a decision
function one Context; it writes what the function returns by compare-and-swap. A function returns
one of:

    Next(stage, state, wait=..., amended=..., refs=..., evidence=...)   the task moves on
    Refuse(reason)     the event is refused: only its sender's receipt is written
    Review(reason)     the task is parked in needs_review for a person
    None               nothing to do (the event changes nothing)

Approvals, waits with deadlines, the version an approval is bound to, the lease, the CAS and the
action log are the runtime's, for every workflow: a workflow asks for them (a Wait, `amended`,
`needs_approval`), it cannot switch them off.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from wakeful.authority.policy import Authorization, authorize
from wakeful.authority.snapshot import Snapshot
from wakeful.schemas.approval import Approval
from wakeful.schemas.checkpoint import PendingWait
from wakeful.sdk.memory import Recall, Remember
from wakeful.sdk.views import Viewed

S = TypeVar("S", bound=BaseModel)

# Stages every workflow has: the runtime moves a task there, whatever the workflow says.
CLOSED, NEEDS_REVIEW, QUARANTINED = "closed", "needs_review", "quarantined"
# A cancel's undo under way, and where a cancelled task ends (workflow/cancels.py).
CANCELLING, CANCELLED = "cancelling", "cancelled"
RUNTIME_STAGES = (CLOSED, NEEDS_REVIEW, QUARANTINED, CANCELLING, CANCELLED)
# How many times the model is asked again after a proposal is refused (Workflow.max_reproposals).
MAX_REPROPOSALS = 3
# The window's optional layers (instructions, the task card and the stage's tools are always in it).
LAYERS = ("recent_events", "memory", "evidence")
# Who may answer a wait or send a workflow's own event kind (Accept.signers, Wait.signers):
REQUESTER = "requester"  # the principal whose event created the task
APPROVERS = "role:approver"  # the live approver list (authority), never one copied into the task
ANYONE = "anyone"  # any signer registered for the kind (checked at the door)
# The task.create payload field that names the workflow (the app's first when absent); the
# runtime's, never passed to the workflow's start.
WORKFLOW_FIELD = "workflow"


@dataclass(frozen=True)
class Wait:
    """Sleep until an `event` from one of `signers` answers, bound to the current task version, or
    until `within` has passed: then `on_deadline` ("escalate:<owner>" parks the task for review,
    "expire" closes it). For an approval, `then` is the stage the task moves to once approved, and
    `count` how many different approvers must approve the version (a quorum: each counted once, and
    only while still an approver); the deadline and its rule are the whole quorum's."""

    event: str
    signers: tuple[str, ...]
    within: timedelta
    on_deadline: str = "escalate:ops"
    then: str | None = None
    count: int = 1


@dataclass(frozen=True)
class Sleep:
    """Sleep until `until`, or for `for_` from the decision, with no lease and no process: the task
    is stored with the time it wakes, which survives restarts and a Redis rebuilt from Kafka. At that
    time it wakes once and moves to `then` (the stage it sleeps at, when None); where that stage
    offers a tool, the model is asked for its step. Any later decision that moves the task (an
    event it accepts) cancels the sleep. Give exactly one of `until` (timezone-aware) and `for_`."""

    until: datetime | None = None
    for_: timedelta | None = None
    then: str | None = None

    def due(self, now: datetime) -> datetime:
        """When the sleep ends, decided `now`."""
        if self.until is not None:
            return self.until
        return now + (self.for_ or timedelta(0))

    def problem(self) -> str | None:
        """Why this sleep cannot be kept, or None."""
        if (self.until is None) == (self.for_ is None):
            return "a Sleep takes exactly one of until= and for_="
        if self.until is not None and self.until.utcoffset() is None:
            return "a Sleep's until= must be timezone-aware (datetime.now(UTC) + ...)"
        if self.for_ is not None and self.for_ <= timedelta(0):
            return "a Sleep's for_= must be more than 0"
        return None


@dataclass(frozen=True)
class Next(Generic[S]):
    """The task moves to `stage`, with `state` (None keeps it). `amended` makes a new task version:
    any approval of the old one is void. `refs` are references into other systems to record;
    `evidence` are documents from outside, kept as untrusted input (name -> text); `remember` are
    memory candidates the runtime writes through memory's write door (sdk/memory.py). `sleep`
    (instead of a `wait`) keeps the task at `stage` until a time (Sleep). `waits` (instead of a
    `wait`) waits for several events at once, each with its own signers and deadline: all of them,
    or `need` of them, in any order (workflow/together.py)."""

    stage: str
    state: S | None = None
    wait: Wait | None = None
    sleep: Sleep | None = None
    waits: tuple[Wait, ...] = ()
    need: int | None = None
    amended: bool = False
    refs: Mapping[str, str] = field(default_factory=dict)
    evidence: Mapping[str, str] = field(default_factory=dict)
    remember: tuple[Remember, ...] = ()


@dataclass(frozen=True)
class Refuse:
    """Refused: the sender's receipt says why; the task is not written."""

    reason: str


@dataclass(frozen=True)
class Review:
    """Parked for a person (needs_review), with the reason recorded on the task."""

    reason: str


@dataclass(frozen=True)
class Effect:
    """A side effect the executor runs once: `tool` with `args`, under `op_key` (the business
    operation, never a per-attempt value; make it with `Context.effect`)."""

    tool: str
    args: BaseModel
    op_key: str


@dataclass(frozen=True)
class Compensate:
    """Undo the succeeded effects of these (reversible) tools, each once, then park the task for a
    person with `reason`."""

    tools: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Start:
    """What a create decision sees: no task exists yet."""

    task_id: str
    principal: str
    tenant: str
    payload: Mapping[str, Any]
    auth: Snapshot
    now: datetime


@dataclass(frozen=True)
class Context(Generic[S]):
    """What every other decision sees: the task as stored, the verified event (for a decision on
    an event), live authority, and the runtime's clock reading."""

    task_id: str
    stage: str
    version: int
    state: S
    requester: str
    tenant: str
    approval: Approval | None
    waits: tuple[PendingWait, ...]
    refs: Mapping[str, str]
    auth: Snapshot
    now: datetime
    started: frozenset[str] = frozenset()  # op keys whose effect has begun (money may have moved)
    principal: str = ""  # the event's verified signer
    payload: Mapping[str, Any] = field(default_factory=dict)  # the event's payload, from outside
    op_key: Callable[[str], str] = field(default=lambda tool: tool, repr=False)
    policy: str = ""  # the policy version the task is stamped with (the one in force if "")
    resource: Mapping[str, Any] = field(default_factory=dict)  # the task as its policy sees it

    def authorize(self, principal: str, action: str, **context: Any) -> Authorization:
        """The app's policy on `principal` doing `action` (an event kind or a tool) to this task,
        with `context` (amount, approver, version, now), in the version the task is stamped with,
        against live authority (authority/policy.py)."""
        facts = {"now": int(self.now.timestamp()), **context}
        if "amount" in self.resource and "amount" not in context:
            facts["amount"] = self.resource["amount"]
        return authorize(principal, action, self.resource, self.auth, facts, stamp=self.policy or None)

    def effect(self, tool: str, args: BaseModel) -> Effect:
        """The effect of `tool` with `args` under the tool's own operation key for this task."""
        return Effect(tool, args, self.op_key(tool))


Decision = Next[S] | Refuse | Review | None
Handler = Callable[[Context[S]], "Next[S] | Refuse | Review | None"]


@dataclass(frozen=True)
class Plan:
    """What one approval covers, when it is more than the first step that needs it.

    `tools`: the effect tools the approval permits at this task version. Without `total`, each runs
    once under it, and the approval is used up once all have run. With `total`, the name of an
    argument every covered tool takes and a whole-number field of the state (an amount, say), they
    run while the sum of that argument over the steps already run stays within the state's value as
    approved; the step that would pass it is refused, and the approval is used up once it is spent.
    """

    tools: tuple[str, ...]
    total: str = ""


@dataclass(frozen=True)
class Accept(Generic[S]):
    """A workflow's own event kind: who may send it, and what it does.

    `signers` name who may send it: REQUESTER, APPROVERS, ANYONE (any signer registered for the
    kind) or "principal:<name>". When the task has a pending Wait for this kind, the runtime first
    holds the event to that wait (its signers, its correlation id, its deadline) and clears it;
    `decide` then says where the task goes. Without a pending wait, `decide` alone judges it
    (check the stage)."""

    decide: Handler[S]
    signers: tuple[str, ...] = (REQUESTER,)


MAX_STEPS = 1000  # the most Workflow.max_steps may be: op keys carry the step number
# How long an approval stays good once given (Workflow.approval_valid_for), and the most a workflow
# may say: a year-old approval no longer speaks for the approver's judgement of the request (D95).
APPROVAL_VALID_FOR = timedelta(hours=24)
MAX_APPROVAL_VALID_FOR = timedelta(days=366)


@dataclass(frozen=True)
class Workflow(Generic[S]):
    """One kind of task. Stages: stage -> the stages it may move to (the runtime adds staying put,
    needs_review and quarantined; terminal stages are those that move nowhere)."""

    name: str
    version: int
    state: type[S]
    stages: Mapping[str, Collection[str]]
    start: Callable[[Start], Next[S] | Refuse]
    check: Callable[[Context[S], Effect], Effect | Refuse | Review]
    done: Callable[[Context[S], str, Mapping[str, Any]], Next[S] | Review]
    events: Mapping[str, Accept[S]] = field(default_factory=dict)
    reopen: Handler[S] | None = None
    failed: Callable[[Context[S], str, str], Compensate | Review] | None = None
    needs_approval: Callable[[Context[S]], bool] = lambda ctx: False
    approval_scope: str = ""  # what an approval of this workflow permits; default "<name>.execute"
    # An approval covers its first step, then is used up; a Plan makes it cover several steps (or a
    # total across them), and single use means one use of the plan (workflow/plans.py).
    approval_plan: Plan | None = None
    # How long an approval stays good once given: its expiry is fixed then, at the moment it was
    # given plus this (an approval already given keeps its own). A step under an expired approval
    # is refused and the task parked for a person. More than 0, at most MAX_APPROVAL_VALID_FOR.
    approval_valid_for: timedelta = APPROVAL_VALID_FOR
    instructions: Mapping[str, str] = field(default_factory=dict)  # policy version -> standing text
    card: Callable[[Context[S]], dict[str, Any]] | None = None  # default: the state's own fields
    window: tuple[str, ...] = LAYERS  # the optional window layers the model is shown
    # Older versions this one upgrades a waiting task from: version -> a pure function from the
    # state's JSON as that version kept it to the JSON this version's `state` reads. Run at the
    # task's next wake (gate 4); a task of a version with no migration runs that version's code if
    # the app keeps it (App.retired), and is quarantined otherwise (docs/change.md).
    migrate: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] = field(default_factory=dict)
    # The state's fields the app's Cedar policy reads, as attributes of the task (`resource.<field>`);
    # one named `amount` is the request's amount too (`context.amount`). Each a whole number, text or
    # a boolean; a field of another type is not shown. Nothing else of the state reaches the policy.
    exposes: tuple[str, ...] = ()
    # Tool calls the model may make at one visit of a stage, each result shown to the next proposal
    # (workflow/steps.py). 1: one call, then `done` moves the task on. Above 1, a `done` that keeps
    # the task at its stage asks the model for the next step; a spent budget parks it for a person.
    max_steps: int = 1
    # A proposal `check` refuses, or a model reply that is no usable proposal, is not the end: the
    # model is asked again, shown why, up to this many times in a row at one stage; the refusal
    # after that parks the task in needs_review with its reason. 0 parks at the first refusal.
    max_reproposals: int = MAX_REPROPOSALS
    # What the window shows of memory: records of these facts about these subjects (sdk/memory.py).
    # None: the memory layer stays empty.
    recall: Recall | None = None
    # A `task.cancel` ends a task that is not finished (workflow/cancels.py): sent by one of these
    # signers (default: any the tenant registered for the kind), it moves the task to `cancelling`;
    # the executor then undoes the succeeded steps of these reversible tools, newest first, each
    # once, and the task ends `cancelled`. A step running at the cancel finishes first.
    cancel_by: tuple[str, ...] = (ANYONE,)
    undo_on_cancel: tuple[str, ...] = ()
    # Which of a tenant's creates held over its in-flight limit go first (D110): 0 to 9, the higher
    # first, then the oldest. It orders the tenant's own queue only, never another tenant's.
    priority: int = 0
    # What the tenant's readers see of a task without unsealing it, on wakeful.log and in the task
    # index: views (name -> a JSON object) and search attributes (name -> a short text), each a pure
    # function of the task as a Viewed, run at every change (sdk/views.py). Never a secret.
    views: Mapping[str, Callable[[Viewed[S]], Mapping[str, Any]]] = field(default_factory=dict)
    attributes: Mapping[str, Callable[[Viewed[S]], object]] = field(default_factory=dict)
