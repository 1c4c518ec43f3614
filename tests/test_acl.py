"""Least privilege in Redis: each role reaches only its own keys and commands."""

from __future__ import annotations

import contextlib
import subprocess
from datetime import UTC, datetime

import pytest
import redis
from helpers import command as command_
from helpers import new_checkpoint

from wakeful.core.settings import Settings
from wakeful.examples import bank
from wakeful.state import acl, functions, keys
from wakeful.state.budget import Account, Budget, Limits
from wakeful.state.lease import ACQUIRE, EXTEND, RELEASE, Leases
from wakeful.state.store import Store

NOPERM = redis.exceptions.NoPermissionError


@pytest.fixture()
def task_id(gate_store: Store) -> str:
    cp = new_checkpoint()
    gate_store.create(cp, "create")
    return cp.task_id


def test_worker_credential_cannot_move_the_counter_backwards(settings: Settings, task_id: str) -> None:
    gate = acl.connect(settings, "gate")
    ctr = keys.ctr(task_id)
    for command in (
        ("SET", ctr, "0"),
        ("DEL", ctr),
        ("UNLINK", ctr),
        ("XTRIM", ctr, "MAXLEN", "0"),
        ("XSETID", ctr, "0-1"),
        ("XDEL", ctr, "1-1"),
        ("RENAME", ctr, keys.ctr("elsewhere")),
        ("EXPIRE", ctr, "1"),
    ):
        with pytest.raises(NOPERM):
            command_(gate, *command)
    with pytest.raises(redis.ResponseError, match="equal or smaller"):
        gate.xadd(ctr, {"v": 0}, id="0-2")  # the one write it may do refuses to go back
    assert command_(gate, "XREVRANGE", ctr, "+", "-", "COUNT", "1")[0][0] == b"1-1"


def test_worker_credential_cannot_delete_or_expire_task_state(settings: Settings, task_id: str) -> None:
    gate = acl.connect(settings, "gate")
    for command in (("DEL", keys.state(task_id)), ("EXPIRE", keys.state(task_id), "1"), ("FLUSHALL",)):
        with pytest.raises(NOPERM):
            command_(gate, *command)
    assert acl.connect(settings, "admin").pttl(keys.state(task_id)) == -1


@pytest.mark.parametrize("role", ["gate", "executor"])
def test_the_task_read_rights_reach_only_the_tasks_own_keys_and_write_nothing(
    settings: Settings, task_id: str, role: str
) -> None:
    """A change's first step is one WATCH of the task's four keys and one MGET of three (D45): those
    rights name no key the role could not already read, and a command that adds one is refused."""
    conn = acl.connect(settings, role)
    state, ctr, lease, marker = (
        keys.state(task_id),
        keys.ctr(task_id),
        keys.lease(task_id),
        keys.quarantine(task_id),
    )
    assert command_(conn, "WATCH", state, ctr, lease, marker) in (b"OK", "OK", True)
    assert command_(conn, "MGET", state, lease, marker)[0] is not None
    command_(conn, "UNWATCH")
    for command in (
        ("MGET", state, keys.AUTH_LIMIT),
        ("MGET", keys.ops(task_id)),
        ("MGET", state, keys.inbox(task_id)),
        ("MGET", bank.fence_key(task_id)),
        ("WATCH", state, keys.ops(task_id)),
        ("WATCH", keys.AUTH_LIMIT),
        ("MSET", state, "x"),
        ("MSETNX", lease, "x"),
    ):
        with pytest.raises(NOPERM):
            command_(conn, *command)


def test_the_gate_can_neither_take_nor_move_a_lease(settings: Settings, leases: Leases, task_id: str) -> None:
    """The gate's changes need the task's lease free, not held (D49): a stolen gate credential can
    neither block the executor with a lease nor move a fence or a holder's lease."""
    gate = acl.connect(settings, "gate")
    held = leases.acquire(task_id)
    lease, fence = keys.lease(task_id), keys.fence(task_id)
    try:
        for command in (
            functions.command(ACQUIRE, [keys.lease("t-other"), keys.fence("t-other")], ["me", 15000]),
            functions.command(RELEASE, [lease], [held.token]),
            functions.command(EXTEND, [lease], [held.token, 60000]),
            ("SET", keys.lease("t-other"), "me:1", "NX", "PX", "15000"),
            ("DEL", lease),
            ("PEXPIRE", lease, "1"),
            ("INCR", fence),
            ("SET", fence, "0"),
        ):
            with pytest.raises(NOPERM):
                command_(gate, *command)
        assert acl.connect(settings, "admin").get(lease) == held.token.encode()
    finally:
        leases.release(held)


def test_the_executors_login_cannot_move_a_fence_back(
    settings: Settings, leases: Leases, task_id: str
) -> None:
    """A downstream refuses a fence below the highest it has seen; a fence set back would let a
    stale holder's token pass again. The executor may only take a lease, which INCRs it."""
    executor, admin = acl.connect(settings, "executor"), acl.connect(settings, "admin")
    leases.release(leases.acquire(task_id))
    fence = keys.fence(task_id)
    before = int(admin.get(fence) or 0)
    for command in (
        ("SET", fence, "0"),
        ("DEL", fence),
        ("DECR", fence),
        ("PEXPIRE", fence, "1"),
        ("GETDEL", fence),
    ):
        with pytest.raises(NOPERM):
            command_(executor, *command)
    held = leases.acquire(task_id)  # still takes leases: the grant's INCR is its one write
    leases.release(held)
    assert held.fence == before + 1 == int(admin.get(fence) or 0)


def test_proposer_can_read_and_write_no_progress(settings: Settings, task_id: str) -> None:
    proposer = acl.connect(settings, "proposer")
    for command in (
        ("GET", keys.state(task_id)),
        ("SET", keys.state(task_id), "x"),
        ("XREVRANGE", keys.ctr(task_id), "+", "-"),
        ("SADD", keys.inbox(task_id), "m"),
        ("GET", keys.lease(task_id)),
        ("HGETALL", keys.ops(task_id)),
        ("GET", keys.AUTH_LIMIT),
        ("INCRBY", keys.state(task_id), "1"),
        ("INCRBY", keys.corr("tokens"), "1"),  # wk:corr:tokens is not a task's counter
        ("INCRBY", bank.fence_key(task_id), "1"),
        ("KEYS", "*"),
        ("SCAN", "0"),
    ):
        with pytest.raises(NOPERM):
            command_(proposer, *command)
    assert proposer.ping()


def test_proposer_may_only_read_and_add_to_its_token_counters(settings: Settings, task_id: str) -> None:
    proposer = acl.connect(settings, "proposer")
    # A tenant of this test's own: the counters outlive the test on a stack that is used again.
    counters = (keys.spent(task_id), keys.tenant_spent(f"acme-{task_id[2:]}"))
    legacy = (keys.tokens(task_id), keys.tenant_tokens(f"acme-{task_id[2:]}", "20261130"))
    for key in counters:
        assert proposer.xadd(key, {"n": 5}, id="5-0", maxlen=1, approximate=False) == b"5-0"
        assert proposer.xinfo_stream(key)["last-generated-id"] == b"5-0"
    for command in (
        ("GET", legacy[0]),  # the counters from before are the admin's to move (state/upgrades.py)
        ("SET", legacy[0], "0"),
        ("INCRBY", legacy[1], "5"),
        ("EXPIRE", counters[1], "60"),
        ("DEL", counters[0]),
        ("XTRIM", counters[0], "MAXLEN", "0"),
        ("XSETID", counters[1], "0-1"),
        ("XDEL", counters[0], "5-0"),
        ("RENAME", counters[0], keys.state(task_id)),
        ("EVAL", "return redis.call('DEL', KEYS[1])", "1", counters[0]),
        ("EVAL", "return redis.call('SET', KEYS[1], 'x')", "1", keys.state(task_id)),
        ("FCALL", "wakeful_lease_release", "1", keys.lease(task_id), "o", "1"),
        ("FUNCTION", "FLUSH"),
        ("MULTI",),
    ):
        with pytest.raises(NOPERM):
            command_(proposer, *command)
    assert acl.connect(settings, "admin").get(keys.state(task_id)) is not None


def test_the_proposer_may_read_the_freezes_and_mark_a_task_held_and_no_more(
    settings: Settings, task_id: str
) -> None:
    """What it needs to honour a freeze (D117): it reads the freezes and marks a frozen task for the
    thaw; it can neither lift nor throw a freeze, nor unmark a task, nor read which tasks are held."""
    proposer = acl.connect(settings, "proposer")
    assert isinstance(proposer.hgetall(keys.AUTH_FROZEN), dict)
    assert proposer.sadd(keys.HELD_TASKS, task_id) in (0, 1)
    for command in (
        ("HSET", keys.AUTH_FROZEN, "all", "{}"),
        ("HDEL", keys.AUTH_FROZEN, "all"),
        ("DEL", keys.AUTH_FROZEN),
        ("INCR", keys.AUTH_SWITCHED),
        ("HGETALL", keys.AUTH_SIGNERS),
        ("SREM", keys.HELD_TASKS, task_id),
        ("SMEMBERS", keys.HELD_TASKS),
        ("DEL", keys.HELD_TASKS),
        ("RPUSH", keys.held(task_id), "x"),
    ):
        with pytest.raises(NOPERM):
            command_(proposer, *command)
    acl.connect(settings, "admin").srem(keys.HELD_TASKS, task_id)


def test_no_command_the_proposer_may_send_moves_a_spent_budget_back(settings: Settings, task_id: str) -> None:
    """The proposer's own login, taken by an attacker, against the budgets it keeps: every write
    it might try is refused or leaves both budgets spent (INCRBY -N and EXPIRE used to lift them)."""
    tenant = f"acme-{task_id[2:]}"  # its own: a tenant's counter outlives a test
    account = Account.at(task_id, tenant, datetime.now(UTC))
    proposer = acl.connect(settings, "proposer")
    task_only, tenant_only = Budget(proposer, Limits(task=500, tenant=0)), Budget(proposer, Limits(0, 500))
    assert task_only.charge(account, 500) == []
    assert task_only.check(account) == f"token budget of 500 for task {task_id} is spent (500 used)"
    assert (
        tenant_only.check(account)
        == f"daily token budget of 500 for tenant {tenant} on {account.day} is spent (500 used)"
    )
    attacker = acl.connect(settings, "proposer")
    elsewhere = keys.tokens(f"{task_id}-x")
    before_streams = (keys.tokens(task_id), keys.tenant_tokens(tenant, account.day))
    for key in (account.task_key, account.tenant_key, *before_streams):
        for command in (
            ("INCRBY", key, "-500"),  # back to exactly 0: a fresh budget
            ("DECRBY", key, "500"),
            ("INCRBYFLOAT", key, "-500"),
            ("SET", key, "0"),
            ("GETDEL", key),
            ("GETEX", key, "PX", "1"),
            ("DEL", key),
            ("UNLINK", key),
            ("EXPIRE", key, "1"),
            ("PEXPIRE", key, "1"),
            ("EXPIREAT", key, "1"),
            ("RENAME", key, elsewhere),
            ("COPY", elsewhere, key, "REPLACE"),
            ("RESTORE", key, "0", b"\x00", "REPLACE"),
            ("XTRIM", key, "MAXLEN", "0"),
            ("XDEL", key, "500-0"),
            ("XSETID", key, "0-1"),
            ("XADD", key, "1-0", "n", "1"),
            ("XADD", key, "MAXLEN", "0", "*", "n", "1"),
            ("EVAL", "return redis.call('DEL', KEYS[1])", "1", key),
            ("FCALL", "wakeful_library", "1", key),
        ):
            with contextlib.suppress(redis.ResponseError):
                command_(attacker, *command)
            assert task_only.check(account) is not None, f"{command} lifted the task's budget"
            assert tenant_only.check(account) is not None, f"{command} lifted the tenant's budget"


@pytest.mark.parametrize("role", ["inbound", "gate", "executor"])
def test_a_role_reaches_no_key_of_another_kind_through_a_name_an_outsider_chose(
    settings: Settings, role: str
) -> None:
    """A tenant named "receipt" had its token counter inside the receipt writers' glob, and a
    correlation id named "state" its key inside the Progress writers' (state/keys.py)."""
    client = acl.connect(settings, role)
    day = datetime.now(UTC).strftime("%Y%m%d")
    for key in (
        keys.tenant_tokens("receipt", day),
        keys.tenant_spent("receipt"),
        # the gate and the executor write correlation ids (each indexes the waits it makes)
        keys.corr("state") if role == "inbound" else keys.seen("key-x", "quarantine"),
        keys.seen("key-x", "quarantine") if role != "inbound" else keys.corr("quarantine"),
    ):
        with pytest.raises(NOPERM):
            client.set(key, "0")
    assert acl.connect(settings, "admin").exists(keys.tenant_tokens("receipt", day)) == 0


def test_roles_cannot_touch_each_others_keys(settings: Settings, task_id: str) -> None:
    gate, relay = acl.connect(settings, "gate"), acl.connect(settings, "relay")
    with pytest.raises(NOPERM):
        gate.hset(keys.ops(task_id), "REFUND:x:v1", "{}")  # the executor's action log
    with pytest.raises(NOPERM):
        gate.spop(keys.OUTBOX_DIRTY)  # the relay's side of the index
    with pytest.raises(NOPERM):
        relay.get(keys.state(task_id))
    with pytest.raises(NOPERM):
        relay.xadd(keys.ctr(task_id), {"v": 9}, id="9-1")
    with pytest.raises(NOPERM):
        acl.connect(settings, "timer").get(keys.state(task_id))
    with pytest.raises(NOPERM):
        acl.connect(settings, "inbound").get(keys.state(task_id))


def test_a_connection_without_credentials_can_do_nothing(settings: Settings, task_id: str) -> None:
    anonymous = redis.Redis.from_url(settings.redis_url)
    with pytest.raises(redis.AuthenticationError):
        anonymous.get(keys.state(task_id))
    ping = subprocess.run(
        ["redis-cli", "-u", settings.redis_url, "ping"], capture_output=True, text=True, check=False
    )
    assert "NOAUTH" in ping.stdout + ping.stderr  # it answers, and refuses a stranger


@pytest.mark.parametrize("role", ["inbound", "gate", "executor"])
def test_the_receipt_writers_may_write_a_receipts_name_and_no_name_of_another_shape(
    settings: Settings, role: str, task_id: str
) -> None:
    """The receipt writers' glob was `wk:receipt:*` and `wk:{*}:receipt:*`: any name at all after the
    prefix (an empty one, one without its event id, a brace) could be written with their login."""
    client = acl.connect(settings, role)
    for name in (
        keys.receipt("evt-00000001", key_id="key-x"),
        keys.receipt("evt-00000001", task_id, key_id="key-x"),
    ):
        assert client.set(name, "{}", ex=5)
    for name in (
        "wk:receipt:",
        "wk:receipt:anything",
        "wk:receipt:key-x:short",
        "wk:receipt::evt-00000001",
        "wk:receipt:key-x:{evt-00000001}",
        f"wk:{{{task_id}}}:receipt:",
        f"wk:{{{task_id}}}:receipt:tokens",
        f"wk:{{{task_id}}}:receipt:key-x:}}:x",
    ):
        with pytest.raises(NOPERM):
            client.set(name, "0")
    assert acl.connect(settings, "admin").exists("wk:receipt:anything") == 0
