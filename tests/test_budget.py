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
from hypothesis import given
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.retry import Retry as RedisRetry

from wakeful.consumers.kafka.handling import TRANSIENT
from wakeful.consumers.kafka.runner import Runner
from wakeful.consumers.proposer.main import Proposer
from wakeful.core import provenance, topics
from wakeful.core.log import Log
from wakeful.core.retry import Retry
from wakeful.core.settings import Settings
from wakeful.schemas.events import Envelope
from wakeful.schemas.proposals import Proposal
from wakeful.state import acl, keys
from wakeful.state.budget import (
    DAY_SPAN,
    MAX_CALL_TOKENS,
    TASK_SPAN,
    Account,
    Budget,
    Counter,
    Limits,
    grown,
    spent,
    tasks_tokens,
    top,
    usage,
)

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


def spend(client: redis.Redis, account: Account, task: int = 0, tenant: int = 0) -> None:
    """Counters as a proposer would have left them after calls that cost this much (as the admin)."""
    if task:
        client.xadd(account.task_key, {"n": task}, id=f"{task}-0")
    if tenant:
        client.xadd(account.tenant_key, {"n": tenant}, id=f"{account.floor + tenant}-0")


def tokens_of(client: redis.Redis, task_id: str) -> int | None:
    [n] = tasks_tokens(client, [task_id])
    return n


def test_spent_task_budget_means_no_model_call_and_a_failed_proposal(
    settings: Settings, redis_client: redis.Redis, task_id: str
) -> None:
    spend(redis_client, Account.at(task_id, TENANT, datetime.now(UTC)), task=100)
    model = CountingModel(tokens=5)
    proposer, sent = proposer_for(settings, model, Limits(task=100, tenant=0))
    proposer.handle(request(settings, task_id))
    assert model.calls == 0
    [proposal] = sent.proposals()
    assert proposal["tool"] == "none"
    assert proposal["failed"] == f"token budget of 100 for task {task_id} is spent (100 used)"
    assert tokens_of(redis_client, task_id) == 100  # a refusal costs nothing


def test_spent_tenant_day_budget_means_no_model_call_for_any_of_its_tasks(
    settings: Settings, redis_client: redis.Redis, task_id: str, tenant_key: str
) -> None:
    spend(redis_client, Account.at(task_id, TENANT, datetime.now(UTC)), tenant=1000)
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
    account = Account.at(task_id, TENANT, datetime.now(UTC))
    assert Budget(redis_client, Limits(0, 0)).usage(account) == (74, 74)
    # A counter that could lapse could be made to lapse: neither has a TTL.
    assert redis_client.ttl(account.task_key) == redis_client.ttl(tenant_key) == -1
    proposer.handle(request(settings, task_id))  # 74 < 100: room for one more call
    proposer.handle(request(settings, task_id))  # 111 >= 100: spent
    assert model.calls == 3
    assert sent.proposals()[-1]["failed"] == f"token budget of 100 for task {task_id} is spent (111 used)"


def test_a_counter_that_is_not_a_number_is_spent_with_its_reason(
    settings: Settings, redis_client: redis.Redis, task_id: str, tenant_key: str
) -> None:
    model = CountingModel(tokens=5)
    proposer, sent = proposer_for(settings, model, Limits(task=100, tenant=1000))
    for key in (keys.spent(task_id), tenant_key):
        redis_client.set(key, "5")  # a string where a stream counter belongs
        proposer.handle(request(settings, task_id))
        redis_client.delete(key)
        assert model.calls == 0
        assert sent.proposals()[-1]["failed"].startswith(f"token counter {key} is not a stream counter (")


def test_a_tenant_counter_from_a_later_day_is_spent_not_fresh(
    settings: Settings, redis_client: redis.Redis, task_id: str, tenant_key: str
) -> None:
    account = Account.at(task_id, TENANT, datetime.now(UTC))
    redis_client.xadd(tenant_key, {"n": 1}, id=f"{account.floor + DAY_SPAN}-0")  # tomorrow's first add
    model = CountingModel(tokens=5)
    proposer, sent = proposer_for(settings, model, Limits(task=0, tenant=1000))
    proposer.handle(request(settings, task_id))
    assert model.calls == 0
    later = f"token counter {tenant_key} holds a count of a day after {account.day}"
    assert sent.proposals()[-1]["failed"] == f"{later}: the budget is treated as spent"


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
    default = Account.at(task_id, "default", datetime.now(UTC))
    found = Budget(redis_client, Limits(0, 0)).usage(default)
    assert not isinstance(found, str), found
    proposer.handle(request(settings, task_id, tenant=None))
    assert Budget(redis_client, Limits(0, 0)).usage(default) == (3, found[1] + 3)


def test_a_report_beyond_any_call_is_charged_at_the_ceiling_and_runs_no_step(
    settings: Settings, redis_client: redis.Redis, task_id: str
) -> None:
    proposer, sent = proposer_for(settings, CountingModel(tokens=MAX_CALL_TOKENS + 1), Limits(0, 0))
    proposer.handle(request(settings, task_id))
    [proposal] = sent.proposals()
    assert proposal["tool"] == "none"
    assert "more than any call can use" in proposal["failed"]
    assert tokens_of(redis_client, task_id) == MAX_CALL_TOKENS


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
    assert tokens_of(redis_client, task_id) == 11
    assert [p["tokens"] for p in sent.proposals()] == [11]


def test_a_proposer_whose_redis_is_down_waits_instead_of_calling_the_model(
    settings: Settings, task_id: str
) -> None:
    model = CountingModel(tokens=1)
    proposer, sent = proposer_for(settings, model, Limits(task=100, tenant=0))
    # Nothing listens; the client's own reconnects, backing off for seconds, are not the proposer's.
    proposer.budget.redis = redis.Redis(
        port=1, socket_connect_timeout=0.5, socket_timeout=0.5, retry=RedisRetry(NoBackoff(), 0)
    )
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
    assert spent(Limits(0, 0), account, (999999999, 999999999)) is None
    assert spent(Limits(10, 0), account, (0, 0)) is None
    assert spent(Limits(10, 0), account, (10, 0)) is not None
    assert (
        spent(Limits(0, 10), account, "damaged") is not None
    )  # a damaged counter is spent, whatever the limit


def test_usage_reads_the_streams_and_refuses_what_is_not_a_count() -> None:
    account = Account("t1", TENANT, "20261130")
    info = {"last-generated-id": b"7-0"}
    today = {"last-generated-id": f"{account.floor + 5}-0".encode()}
    missing = redis.ResponseError("no such key")
    assert usage(account, [missing, missing]) == (0, 0)
    assert usage(account, [info, today]) == (7, 5)
    yesterday = {"last-generated-id": f"{account.floor - 1}-0".encode()}
    assert usage(account, [info, yesterday]) == (7, 0)  # a new day starts at nothing
    damaged: list[list[object]] = [
        [redis.ResponseError("WRONGTYPE"), today],
        [info, redis.ResponseError("WRONGTYPE")],
        [info, {"last-generated-id": b"x-0"}],
        [info, {"last-generated-id": f"{account.floor + DAY_SPAN}-0".encode()}],  # a later day's
    ]
    for replies in damaged:
        assert isinstance(usage(account, replies), str), replies


def test_top_reads_a_streams_last_generated_id_however_it_was_trimmed() -> None:
    assert top({"length": 0, "last-generated-id": b"42-0", "last-entry": None}) == 42
    assert top(redis.ResponseError("no such key")) == 0
    assert top(redis.ResponseError("WRONGTYPE Operation against a key")) is None
    assert top({"last-generated-id": b"x-0"}) is None
    assert top(b"42") is None


@given(
    count=st.integers(0, 2**64 - 1),
    floor=st.integers(0, 2**40).map(lambda d: d * DAY_SPAN),
    tokens=st.integers(1, MAX_CALL_TOKENS),
)
def test_a_charge_only_ever_moves_a_counter_forward_and_within_its_day(
    count: int, floor: int, tokens: int
) -> None:
    ceiling = floor + DAY_SPAN
    after = grown(count, floor, tokens, ceiling)
    if after is None:  # nothing to add: already at (or past) the day's last count
        assert count >= ceiling - 1
        return
    assert after > count
    assert floor <= after < ceiling
    assert after - floor == min(max(count, floor) - floor + tokens, DAY_SPAN - 1)  # the day's count


@given(count=st.integers(0, TASK_SPAN - 1), tokens=st.integers(1, MAX_CALL_TOKENS))
def test_a_task_counter_grows_by_what_a_call_cost_until_it_saturates(count: int, tokens: int) -> None:
    window = Counter("k").window(count)
    assert window == (0, TASK_SPAN)  # a task's count is of all time: any count is in it
    after = grown(count, *window[:1], tokens, window[1])
    if count >= TASK_SPAN - 1:
        assert after is None
    else:
        assert after == min(count + tokens, TASK_SPAN - 1)


@pytest.mark.parametrize(
    ("count", "turning", "window"),
    [
        (4 * DAY_SPAN - 1, False, (4 * DAY_SPAN, 5 * DAY_SPAN)),  # yesterday's: today starts at nothing
        (4 * DAY_SPAN + 7, False, (4 * DAY_SPAN, 5 * DAY_SPAN)),  # today's
        (5 * DAY_SPAN + 7, False, None),  # tomorrow's, with the day far from its end: only misuse writes it
        (5 * DAY_SPAN + 7, True, (5 * DAY_SPAN, 6 * DAY_SPAN)),  # a proposer whose clock is ahead got there
        (6 * DAY_SPAN, True, None),  # two days ahead is no clock
    ],
)
def test_a_tenant_count_of_the_next_day_is_that_days_only_near_midnight(
    count: int, turning: bool, window: tuple[int, int] | None
) -> None:
    assert Counter("k", 4 * DAY_SPAN, DAY_SPAN, turning).window(count) == window


@pytest.mark.parametrize(
    ("now", "turning"),
    [
        (datetime(2026, 12, 1, 23, 54, 59, tzinfo=UTC), False),
        (datetime(2026, 12, 1, 23, 55, 0, tzinfo=UTC), True),
        (datetime(2026, 12, 1, 0, 0, 1, tzinfo=UTC), False),
    ],
)
def test_an_account_knows_when_its_day_is_about_to_turn(now: datetime, turning: bool) -> None:
    assert Account.at("t-1", TENANT, now).turning is turning
