"""The proposer: calls the model with the window and checks only the SHAPE of its answer.

It holds no tool credential: it reads wakeful.proposals.request and writes wakeful.proposals. In
Redis it reaches its token counters (state/budget.py): a task or tenant whose budget is spent gets
no model call, but a failed proposal, which the executor parks for a person with the reason; and the
freezes (frozen.py): a frozen task's request gets no model call and no answer, and the task is
marked for the thaw, which has the gate ask again. Whatever the model says is only a proposal; the
executor decides.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Message, Producer
from pydantic import ValidationError

from wakeful.consumers.kafka.overlap import OverlapRunner
from wakeful.consumers.kafka.producing import RunnerProducer
from wakeful.consumers.kafka.role import run_role
from wakeful.consumers.kafka.runner import Runner
from wakeful.consumers.proposer.frozen import Freezes
from wakeful.consumers.proposer.models import Model, make_model
from wakeful.core import topics, tracing
from wakeful.core.errors import DecodeError
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.core.log import Log
from wakeful.core.provenance import Forged, RoleKeys, load_keys
from wakeful.core.settings import Settings
from wakeful.schemas import events
from wakeful.schemas.base import cut
from wakeful.schemas.events import Envelope
from wakeful.schemas.proposals import Proposal
from wakeful.state import acl
from wakeful.state.budget import MAX_CALL_TOKENS, Account, Budget, Limits, insane

# Proposals made but not yet sent (a charge or a produce to retry), kept so that a retry does not
# call the model again. A rebalance can strand one; the oldest go first.
MADE_KEPT = 1024
REDIS_TIMEOUT_S = 2.0  # a slow Redis is a transient failure, retried with backoff, never a wedge
FAILED_CHARS = 500  # Proposal.failed's bound


@dataclass
class Made:
    """A proposal for one request, whose budgets it spends, and whether they were charged."""

    account: Account
    proposal: Proposal
    charged: bool = False


class Proposer:
    def __init__(
        self,
        model: Model,
        producer: Producer,
        log: Log,
        keys: RoleKeys,
        budget: Budget,
        *,
        freezes: Freezes | None = None,
    ) -> None:
        self.model = model
        self.freezes = freezes or Freezes(budget.redis)  # the same login, the same connection
        self.role_keys = keys
        self.producer = producer
        self.log = log
        self.budget = budget
        self.runner: Runner | None = None
        self._made: OrderedDict[str, Made] = OrderedDict()
        self._lock = threading.Lock()

    def handle(self, msg: Message) -> None:
        assert self.runner is not None
        sender = self.role_keys.sender(
            topics.PROPOSALS_REQUEST, msg.key() or b"", msg.value() or b"", msg.headers()
        )
        if isinstance(sender, Forged):  # the model never sees a window the gate did not build
            self.runner.dead_letter(msg, sender.reason)
            return
        try:
            request = Envelope.decode(msg.value() or b"")
            tracing.stamp(task_id=request.task_id, state_version=request.task_version, model=self.model.name)
            if request.kind == events.UNDO_REQUEST:  # the runtime's own request: no model, no tokens
                return self._answer(request, events.UNDO_REQUEST, {})
            window = request.payload["window"]
            made = self._take(request.message_id)  # made by an attempt that failed after the call
            if made is None:
                account, refused, frozen = self._account(request)  # one round trip, with the freezes
                held = self.freezes.holding(request.task_id, request.payload, frozen)
                if held is not None:  # no model call, no tokens, no answer: the thaw asks again
                    self.log("proposer.held", task_id=request.task_id, scope=held.scope)
                    return None
                if refused is None:
                    proposal = self.model.propose(window)
                    # Shape only: a proposal that is not a Proposal never leaves this role.
                    proposal = Proposal.model_validate_json(proposal.encode())
                answer = self._no_call(refused) if refused is not None else self._believed(proposal)
                made = self._keep(request.message_id, Made(account, answer))
        except (DecodeError, KeyError, TypeError, ValidationError) as exc:
            self.runner.dead_letter(msg, f"proposal request or answer has the wrong shape: {exc!r}")
            return
        if not made.charged:
            for problem in self.budget.charge(made.account, made.proposal.tokens):
                self.log("proposer.tokens_uncounted", task_id=request.task_id, error=cut(problem, 300))
            made.charged = True
        self._answer(request, "proposal", made.proposal.model_dump(mode="json"))
        self._forget(request.message_id)
        return None

    def _answer(self, request: Envelope, kind: str, payload: dict[str, Any]) -> None:
        """The answer to one request, for the executor."""
        out = Envelope(
            message_id=f"proposal:{request.task_id}:{request.task_version}",
            task_id=request.task_id,
            task_version=request.task_version,
            kind=kind,
            created_at=datetime.now(UTC),
            trace_id=request.trace_id,
            payload=payload,
            in_reply_to=request.message_id,
        )
        self.producer.produce(topics.PROPOSALS, key=request.task_id.encode(), value=out.encode())

    def _account(self, request: Envelope) -> tuple[Account, str | None, Any]:
        """Whose budgets a model call for the request spends, why none may be made (or None), and
        the freezes as read in the same round trip (None where they were not read)."""
        tenant = str(request.payload.get("tenant", DEFAULT_TENANT))  # none: from a gate before tenants
        now = datetime.now(UTC)
        try:
            account = Account.at(request.task_id, tenant, now)
        except ValueError as exc:  # a tenant that cannot name its counter has no budget to spend
            return Account.at(request.task_id, DEFAULT_TENANT, now), f"the request's tenant: {exc}", None
        refused, [frozen] = self.budget.check_with(account, [Freezes.READ])
        return account, refused, frozen

    def _no_call(self, reason: str) -> Proposal:
        """What the executor parks the task with, in place of a model call."""
        why = cut(reason, FAILED_CHARS)
        return Proposal(tool="none", args={}, rationale="no model call", model=self.model.name, failed=why)

    def _believed(self, proposal: Proposal) -> Proposal:
        """The proposal, unless the tokens it says it cost cannot be: then a failed one, charged
        at the ceiling, so that a broken report neither lifts a budget nor runs a step."""
        wrong = insane(proposal.tokens)
        if wrong is None:
            return proposal
        return self._no_call(wrong).model_copy(update={"tokens": MAX_CALL_TOKENS})

    def _take(self, request_id: str) -> Made | None:
        with self._lock:
            return self._made.get(request_id)

    def _keep(self, request_id: str, made: Made) -> Made:
        with self._lock:
            self._made[request_id] = made
            while len(self._made) > MADE_KEPT:
                self._made.popitem(last=False)
        return made

    def _forget(self, request_id: str) -> None:
        with self._lock:
            self._made.pop(request_id, None)


def main(settings: Settings, stop: threading.Event) -> None:
    keys = load_keys(settings, "proposer")  # local files first: a missing one stops the role before any wait
    limits = Limits(task=settings.model_task_tokens, tenant=settings.model_tenant_tokens)
    budget = Budget(acl.connect(settings, "proposer", timeout=REDIS_TIMEOUT_S), limits)

    def build(producer: RunnerProducer, log: Log) -> Proposer:
        return Proposer(make_model(settings), producer, log, keys, budget)

    # A slow model call holds up only its own task.
    log = Log(role="proposer", model=settings.model)
    run_role(settings, stop, "proposer", topics.PROPOSALS_REQUEST, build, runner=OverlapRunner, log=log)
