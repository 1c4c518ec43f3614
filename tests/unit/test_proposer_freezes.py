"""The proposer honours freezes (D117): a request for a task that a freeze holds gets no model call,
spends no tokens and is answered with nothing, and the task is marked for the thaw; a request the
gate made before a freeze, read after the freeze is lifted, is answered as ever. Nothing of it is
dead-lettered. Redis and Kafka are stand-ins here: the stack's own test is tests/test_model_kill_path.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import pytest
import redis

from wakeful.authority.freezes import Freeze, record
from wakeful.consumers.proposer import frozen
from wakeful.consumers.proposer.frozen import Freezes
from wakeful.consumers.proposer.main import Proposer
from wakeful.core import topics
from wakeful.core.log import Log
from wakeful.core.provenance import RoleKeys, RoleSigner
from wakeful.core.retry import Retry
from wakeful.schemas.events import Envelope
from wakeful.schemas.proposals import Proposal
from wakeful.state import keys
from wakeful.state.budget import Account, Budget, Limits

CHANNEL = bytes(range(32))
TASK = "acme.t-1"


def freeze(scope: str) -> Freeze:
    return Freeze(scope, "ops-lead", "incident", "2026-12-01T20:00:00Z")


def scoped(*scopes: str) -> dict[str, Freeze]:
    return {s: freeze(s) for s in scopes}


@pytest.mark.parametrize(
    ("found", "payload", "held_by"),
    [
        ({}, {"app": "loopy", "tenant": "acme"}, None),
        (scoped("all"), {"app": "loopy", "tenant": "acme"}, "all"),  # `freeze --all`
        (scoped("all"), {}, "all"),  # a request from a gate before the app and tenant were named
        (scoped("tenant:acme"), {"app": "loopy", "tenant": "acme"}, "tenant:acme"),
        (scoped("tenant:other"), {"app": "loopy", "tenant": "acme"}, None),
        (scoped("tenant:default"), {"app": "loopy"}, "tenant:default"),  # no tenant named: the default
        (scoped("app:loopy"), {"app": "loopy", "tenant": "acme"}, "app:loopy"),
        (scoped("app:refund"), {"app": "loopy", "tenant": "acme"}, None),
        (scoped("app:loopy"), {"tenant": "acme"}, None),  # no app named: the executor holds it
        (scoped("app:loopy"), {"app": ["loopy"], "tenant": "acme"}, None),  # not a name: none
        (scoped(f"task:{TASK}"), {"app": "loopy", "tenant": "acme"}, f"task:{TASK}"),
        (scoped("task:acme.t-2"), {"app": "loopy", "tenant": "acme"}, None),
        (scoped("all", "tenant:acme", f"task:{TASK}"), {"tenant": "acme"}, f"task:{TASK}"),  # most specific
    ],
)
def test_a_request_is_held_by_exactly_the_freezes_that_hold_its_task(
    found: dict[str, Freeze], payload: dict[str, Any], held_by: str | None
) -> None:
    holds = frozen.holding(found, payload, TASK)
    assert (holds.scope if holds else None) == held_by


class Redis:
    """A stand-in for the proposer's Redis: the freezes hash as each read finds it, and the marks."""

    def __init__(self, *reads: dict[str, Freeze], refuse: bool = False) -> None:
        self.reads = [{s.encode(): record(f.by, f.reason, f.at) for s, f in r.items()} for r in reads]
        self.marked: list[str] = []
        self.refuse = refuse

    def hgetall(self, key: str) -> dict[bytes, bytes]:
        assert key == keys.AUTH_FROZEN
        if self.refuse:
            raise redis.exceptions.NoPermissionError("NOPERM this user has no permissions")
        return self.reads.pop(0)

    def sadd(self, key: str, member: str) -> int:
        assert key == keys.HELD_TASKS
        self.marked.append(member)
        return 1


LOOPY = {"app": "loopy", "tenant": "acme"}


@pytest.mark.parametrize(
    ("reads", "held", "marked"),
    [
        (({},), False, False),  # nothing frozen: one read, no mark, the model is asked
        ((scoped("all"), scoped("all")), True, True),  # frozen, and still after the mark: held
        ((scoped("all"), {}), False, True),  # thawed between: the model is asked (a mark is left)
        ((scoped("all"), scoped("tenant:acme")), True, True),  # another freeze holds it still
        ((scoped("tenant:other"),), False, False),
    ],
)
def test_a_frozen_task_is_marked_for_the_thaw_before_it_is_held_and_read_again_after(
    reads: tuple[dict[str, Freeze], ...], held: bool, marked: bool
) -> None:
    client = Redis(*reads)
    found = Freezes(cast(redis.Redis, client)).holding(TASK, LOOPY)
    assert (found is not None) is held
    assert client.marked == ([TASK] if marked else [])
    assert client.reads == []  # each read it was given was made


def test_a_proposer_user_without_the_freeze_rights_waits_for_an_operator_rather_than_call_the_model() -> None:
    with pytest.raises(Retry, match="admin acl --apply"):
        Freezes(cast(redis.Redis, Redis(refuse=True))).holding(TASK, LOOPY)


class Model:
    name = "counting"

    def __init__(self) -> None:
        self.windows: list[dict[str, Any]] = []

    def propose(self, window: dict[str, Any]) -> Proposal:
        self.windows.append(window)
        return Proposal(tool="find_order", args={}, rationale="r", model=self.name, tokens=150)


class Counters(Budget):
    """The token counters, recording each charge instead of writing it; the reads that ride with
    the budget's (the freezes) are read from the stand-in Redis."""

    def __init__(self, client: Redis) -> None:
        super().__init__(cast(redis.Redis, None), Limits(task=0, tenant=0))
        self.client = client
        self.charged: list[int] = []

    def check_with(
        self, account: Account, also: Sequence[tuple[Any, ...]]
    ) -> tuple[str | None, list[object]]:
        assert [command for command, _ in also] == ["HGETALL"]
        return None, [self.client.hgetall(key) for _, key in also]

    def charge(self, account: Account, tokens: int) -> list[str]:
        self.charged.append(tokens)
        return []


class Out:
    """Stands in for the producer and the runner."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.letters: list[str] = []

    def produce(self, topic: str, key: bytes, value: bytes) -> None:
        assert topic == topics.PROPOSALS
        self.sent.append(value)

    def dead_letter(self, msg: Any, reason: str) -> None:
        self.letters.append(reason)


class Message:
    def __init__(self, value: bytes) -> None:
        self._value = value
        self._headers = RoleSigner("gate", "gate-1", CHANNEL).headers(
            topics.PROPOSALS_REQUEST, TASK.encode(), value
        )

    def key(self) -> bytes:
        return TASK.encode()

    def value(self) -> bytes:
        return self._value

    def headers(self) -> list[tuple[str, Any]]:
        return self._headers


def request() -> Message:
    window = {"task_card": {"task_id": TASK}, "tools": [{"name": "find_order"}], "evidence": []}
    envelope = Envelope(
        message_id=f"request:{TASK}:3",
        task_id=TASK,
        task_version=3,
        kind="proposal.request",
        created_at=datetime.now(UTC),
        trace_id="trace-1",
        payload={"window": window, **LOOPY},
    )
    return Message(envelope.encode())


@pytest.mark.parametrize(("reads", "asked"), [(({},), True), ((scoped("all"), scoped("all")), False)])
def test_a_frozen_fleet_spends_no_tokens_and_answers_nothing_and_dead_letters_nothing(
    reads: tuple[dict[str, Freeze], ...], asked: bool
) -> None:
    client = Redis(*reads)
    model, counters, out = Model(), Counters(client), Out()
    keys_ = RoleKeys({"gate-1": ("gate", CHANNEL)})
    proposer = Proposer(
        model, cast(Any, out), Log(), keys_, counters, freezes=Freezes(cast(redis.Redis, client))
    )
    proposer.runner = cast(Any, out)
    proposer.handle(cast(Any, request()))
    assert out.letters == []
    assert (len(model.windows), len(out.sent), counters.charged) == ((1, 1, [150]) if asked else (0, 0, []))
    assert client.marked == ([] if asked else [TASK])
