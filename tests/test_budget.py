"""The model token budget: a spent budget gets no model call, what a call costs is counted for the
task and its tenant, and a counter that is not a number never lifts a limit. The proposer is driven
with handle() against the real Redis, as its own ACL user."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, cast

import pytest
import redis
from confluent_kafka import Consumer, Message, Producer
from helpers import StandInConsumer, role_message

from wakeful.consumers.handling import TRANSIENT
from wakeful.consumers.models import Proposal
from wakeful.consumers.proposer import Proposer
from wakeful.consumers.runner import Runner
from wakeful.core import provenance, topics
from wakeful.core.log import Log
from wakeful.core.retry import Retry
from wakeful.core.settings import Settings
from wakeful.schemas.events import Envelope
from wakeful.state import acl, keys
from wakeful.state.budget import MAX_CALL_TOKENS, Account, Budget, Limits, spent

TENANT = "acme"


class CountingModel:
    """Answers every window with one proposal that says it cost `tokens`, and counts the calls."""

    name = "counting"

    def __init__(self, tokens: int = 0) -> None:
        self.tokens = tokens
        self.calls = 0

    def propose(self, window: dict[str, Any]) -> Proposal:
        self.calls += 1
        return Proposal(tool="refund", args={}, rationale="test", model=self.name, tokens=self.tokens)


class Recorder:
    """The producer side: what the proposer sent, and what the runner dead-lettered."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    def produce(self, topic: str, value: bytes | None = None, **_: Any) -> None:
        self.sent.append((topic, value or b""))

    def flush(self, _timeout: float) -> int:
        return 0

    def proposals(self) -> list[dict[str, Any]]:
        out = []
        for topic, value in self.sent:
            assert topic == topics.PROPOSALS, f"sent to {topic}: {value[:300]!r}"
            out.append(Envelope.decode(value).payload)
        return out


class FlakyBudget(Budget):
    """A budget whose first charge finds Redis gone."""

    failed = False

    def charge(self, account: Account, tokens: int) -> list[str]:
        if not self.failed:
            self.failed = True
            raise redis.ConnectionError("Redis went away")
        return super().charge(account, tokens)


def proposer_for(
    settings: Settings, model: CountingModel, limits: Limits, budget: type[Budget] = Budget
) -> tuple[Proposer, Recorder]:
    recorder = Recorder()
    p = Proposer(
        model,
        cast(Producer, recorder),
        Log(),
        provenance.load_keys(settings, "proposer"),
        budget(acl.connect(settings, "proposer", timeout=2.0), limits),
    )
    p.runner = Runner(
        "proposer", topics.PROPOSALS_REQUEST, p.handle, cast(Consumer, StandInConsumer()),
        cast(Producer, recorder), log=Log(), threads=2,
    )  # fmt: skip
    return p, recorder


def request(settings: Settings, task_id: str, tenant: str | None = TENANT) -> Message:
    """A proposal request as the gate sends it (tagged with its channel key)."""
    payload: dict[str, Any] = {"window": {"task_card": {}, "tools": [], "evidence": []}}
    if tenant is not None:
        payload["tenant"] = tenant
    envelope = Envelope(
        message_id=f"propreq:{task_id}:3",
        task_id=task_id,
        task_version=3,
        kind="proposal.request",
        created_at=datetime.now(UTC),
        trace_id=task_id,
        payload=payload,
    )
    return role_message(settings, "gate", topics.PROPOSALS_REQUEST, task_id, envelope.encode())


@pytest.fixture()
def task_id(redis_url: str) -> str:
    return f"tok-{uuid.uuid4().hex[:12]}"


@pytest.fixture()
def tenant_key() -> str:
    return Account.at("t", TENANT, datetime.now(UTC)).tenant_key


@pytest.fixture(autouse=True)
def _fresh_tenant_day(redis_client: redis.Redis, tenant_key: str) -> None:
    redis_client.delete(tenant_key)


def test_spent_task_budget_means_no_model_call_and_a_failed_proposal(
    settings: Settings, redis_client: redis.Redis, task_id: str
) -> None:
    redis_client.set(keys.tokens(task_id), 100)
    model = CountingModel(tokens=5)
    proposer, sent = proposer_for(settings, model, Limits(task=100, tenant=0))
    proposer.handle(request(settings, task_id))
    assert model.calls == 0
    [proposal] = sent.proposals()
    assert proposal["tool"] == "none"
    assert proposal["failed"] == f"token budget of 100 for task {task_id} is spent (100 used)"
    assert redis_client.get(keys.tokens(task_id)) == b"100"  # a refusal costs nothing


def test_spent_tenant_day_budget_means_no_model_call_for_any_of_its_tasks(
    settings: Settings, redis_client: redis.Redis, task_id: str, tenant_key: str
) -> None:
    redis_client.set(tenant_key, 1000)
    model = CountingModel(tokens=5)
    proposer, sent = proposer_for(settings, model, Limits(task=0, tenant=1000))
    proposer.handle(request(settings, task_id))
    assert model.calls == 0
    [proposal] = sent.proposals()
    assert proposal["failed"].startswith(f"daily token budget of 1000 for tenant {TENANT} on ")


def test_tokens_a_call_cost_are_counted_for_the_task_and_its_tenant_day(
    settings: Settings, redis_client: redis.Redis, task_id: str, tenant_key: str
) -> None:
    model = CountingModel(tokens=37)
    proposer, sent = proposer_for(settings, model, Limits(task=100, tenant=1000))
    proposer.handle(request(settings, task_id))
    proposer.handle(request(settings, task_id))  # a redelivery calls again, and is counted again
    assert model.calls == 2
    assert [p["tokens"] for p in sent.proposals()] == [37, 37]
    assert redis_client.get(keys.tokens(task_id)) == b"74"
    assert redis_client.get(tenant_key) == b"74"
    assert 0 < redis_client.ttl(tenant_key) <= keys.TENANT_TOKENS_TTL_S
    assert redis_client.ttl(keys.tokens(task_id)) == -1  # a task's key never lapses while it lives
    proposer.handle(request(settings, task_id))  # 74 < 100: room for one more call
    proposer.handle(request(settings, task_id))  # 111 >= 100: spent
    assert model.calls == 3
    assert sent.proposals()[-1]["failed"] == f"token budget of 100 for task {task_id} is spent (111 used)"


def test_a_counter_that_is_not_a_number_is_spent_with_its_reason(
    settings: Settings, redis_client: redis.Redis, task_id: str, tenant_key: str
) -> None:
    model = CountingModel(tokens=5)
    proposer, sent = proposer_for(settings, model, Limits(task=100, tenant=1000))
    for key, value in ((keys.tokens(task_id), "12abc"), (tenant_key, "-5")):
        redis_client.set(key, value)
        proposer.handle(request(settings, task_id))
        redis_client.delete(key)
        assert model.calls == 0
        failed = sent.proposals()[-1]["failed"]
        held = f"token counter {key} holds {value.encode()!r}"
        assert failed == f"{held}, not a count of tokens: the budget is treated as spent"


def test_a_tenant_that_cannot_name_a_counter_gets_no_model_call(settings: Settings, task_id: str) -> None:
    model = CountingModel(tokens=5)
    proposer, sent = proposer_for(settings, model, Limits(task=100, tenant=1000))
    proposer.handle(request(settings, task_id, tenant="a:b}"))
    assert model.calls == 0
    assert "cannot name a Redis key" in sent.proposals()[-1]["failed"]


def test_a_request_from_before_tenants_spends_the_default_tenants_budget(
    settings: Settings, redis_client: redis.Redis, task_id: str
) -> None:
    proposer, _ = proposer_for(settings, CountingModel(tokens=3), Limits(task=100, tenant=0))
    default_day = Account.at(task_id, "default", datetime.now(UTC)).tenant_key
    before = int(redis_client.get(default_day) or 0)
    proposer.handle(request(settings, task_id, tenant=None))
    assert int(redis_client.get(default_day) or 0) == before + 3


def test_a_report_beyond_any_call_is_charged_at_the_ceiling_and_runs_no_step(
    settings: Settings, redis_client: redis.Redis, task_id: str
) -> None:
    proposer, sent = proposer_for(settings, CountingModel(tokens=MAX_CALL_TOKENS + 1), Limits(0, 0))
    proposer.handle(request(settings, task_id))
    [proposal] = sent.proposals()
    assert proposal["tool"] == "none"
    assert "more than any call can use" in proposal["failed"]
    assert redis_client.get(keys.tokens(task_id)) == str(MAX_CALL_TOKENS).encode()


def test_a_charge_retried_after_redis_failed_does_not_call_the_model_again(
    settings: Settings, redis_client: redis.Redis, task_id: str
) -> None:
    model = CountingModel(tokens=11)
    proposer, sent = proposer_for(settings, model, Limits(task=100, tenant=0), budget=FlakyBudget)
    msg = request(settings, task_id)
    with pytest.raises(redis.ConnectionError) as info:
        proposer.handle(msg)
    assert isinstance(info.value, TRANSIENT)  # the runner retries it with backoff, never dead-letters
    assert sent.sent == []
    proposer.handle(msg)  # the runner's retry
    assert model.calls == 1
    assert redis_client.get(keys.tokens(task_id)) == b"11"
    assert [p["tokens"] for p in sent.proposals()] == [11]


def test_a_proposer_whose_redis_is_down_waits_instead_of_calling_the_model(
    settings: Settings, task_id: str
) -> None:
    model = CountingModel(tokens=1)
    proposer, sent = proposer_for(settings, model, Limits(task=100, tenant=0))
    proposer.budget.redis = redis.Redis(
        port=1, socket_connect_timeout=0.5, socket_timeout=0.5
    )  # nothing listens
    with pytest.raises(redis.ConnectionError) as info:
        proposer.handle(request(settings, task_id))
    assert isinstance(info.value, TRANSIENT)
    assert model.calls == 0
    assert sent.sent == []


def test_a_proposer_without_rights_to_its_counters_waits_for_an_operator(
    settings: Settings, task_id: str
) -> None:
    model = CountingModel(tokens=1)
    proposer, sent = proposer_for(settings, model, Limits(task=100, tenant=0))
    proposer.budget.redis = acl.connect(settings, "timer")  # users not reloaded: NOPERM on every counter
    with pytest.raises(Retry, match="reload the users"):
        proposer.handle(request(settings, task_id))
    assert model.calls == 0
    assert sent.sent == []


def test_limits_of_zero_mean_no_limit_and_no_read() -> None:
    account = Account("t1", TENANT, "20261130")
    assert spent(Limits(0, 0), account, b"999999999", b"999999999") is None
    assert spent(Limits(10, 0), account, None, None) is None
    assert spent(Limits(10, 0), account, b"10", None) is not None
    assert spent(Limits(0, 10), account, b"", None) is not None  # empty is not a number either
    assert spent(Limits(0, 10), account, None, redis.ResponseError("WRONGTYPE")) is not None
