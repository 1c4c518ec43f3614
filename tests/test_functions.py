"""No role runs Lua of its own choosing: the admin loads wakeful's function library, roles only call
it, within their own keys, and it outlives a Redis restart. Checked with Debian's redis-cli, the way
an operator (or an attacker holding one role's password) would try."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis
from helpers import downstream_as, downstream_login, free_ports

from wakeful.core import process, secrets
from wakeful.core.retry import FunctionsMissing, Retry
from wakeful.core.settings import Settings
from wakeful.devstack import redis_server
from wakeful.examples import bank
from wakeful.examples.bank import Bank
from wakeful.state import acl, keys, library, rates
from wakeful.state.actions import ActionLog
from wakeful.state.lease import Leases

ROLES = [role for role in acl.ROLES if role != "admin"]
LOOP = "while true do end"
DEADLINE_S = 30.0


def redis_cli(settings: Settings, role: str, *args: str) -> str:
    """Debian's redis-cli, logged in with the role's own credential (a downstream's: one of its
    rights made for the test, as it has no static login, D125)."""
    cli = shutil.which("redis-cli")
    assert cli, "redis-cli is missing: run `bash scripts/setup`"
    if role in acl.minted_only(settings):
        user, password = downstream_login(settings, role)
        cred = {"user": user, "password": password}
    else:
        cred = secrets.load(settings, role, "redis")
    login = [
        "--no-auth-warning",
        "-u",
        settings.redis_url,
        "--user",
        cred["user"],
        "--pass",
        cred["password"],
    ]
    result = subprocess.run(
        [cli, *login, *args],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    return result.stdout + result.stderr


def test_no_role_may_run_lua_of_its_own(settings: Settings, redis_client: redis.Redis) -> None:
    loop_library = f"#!lua name=intruder\nredis.register_function('intruder', function() {LOOP} end)"
    # Harmless attempts first: were one allowed, the test stops before a loop could block the stack.
    attempts = [
        ("EVAL", "return 1", "0"),
        ("EVAL_RO", "return 1", "0"),
        ("EVAL", LOOP, "0"),
        ("EVALSHA", hashlib.sha1(LOOP.encode()).hexdigest(), "0"),
        ("SCRIPT", "LOAD", LOOP),
        ("FUNCTION", "LOAD", loop_library),
        ("FUNCTION", "LOAD", "REPLACE", f"#!lua name={library.LIBRARY}\n{LOOP}"),
        ("FUNCTION", "DELETE", library.LIBRARY),
        ("FUNCTION", "FLUSH"),
        ("FUNCTION", "RESTORE", "x"),
        ("FUNCTION", "KILL"),
        ("SCRIPT", "FLUSH"),
    ]
    for role in ROLES:
        for attempt in attempts:
            answer = redis_cli(settings, role, *attempt)
            assert answer.startswith("NOPERM"), (role, attempt, answer)
    # Nothing of theirs is stored, the library is whole, and the server is not busy with a loop.
    assert redis_client.script_exists(hashlib.sha1(LOOP.encode()).hexdigest()) == [False]
    assert redis_client.function_list(library="intruder") == []
    started = time.monotonic()
    assert redis_client.ping() and time.monotonic() - started < 1.0
    library.check(acl.connect(settings, "executor"), settings)


def test_a_role_calling_a_function_with_keys_outside_its_selectors_is_refused(
    settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    task = f"t-{unique}"
    op = f"REFUND:{task}:v1"
    refused = [
        # The gate calls the bank's refund with the bank's keys: it may FCALL only with a tenant's
        # flight set and queue (D49, D108).
        (
            "gate",
            "bank_refund",
            [bank.entry_key(op), bank.fence_key(task), bank.faults_key(task), bank.LEDGER],
        ),
        # The gate may read the action log, but not write it through the executor's function.
        ("gate", "action_begin", [keys.ops(task), keys.lease(task)]),
        # The gate's function right reaches no lease, and the timer's none either.
        ("gate", "lease_acquire", [keys.lease(task), keys.fence(task)]),
        ("gate", "fair_take", [keys.state(task), keys.lease(task)]),
        ("timer", "lease_acquire", [keys.lease(task), keys.fence(task)]),
        # The executor gives a slot back, and admits nothing.
        ("executor", "fair_take", [keys.fair_flight(unique), keys.fair_queue(unique)]),
        # Only the executor counts a tool's calls (D109).
        ("gate", "rate_take", [keys.tool_rate("app", unique)]),
        ("timer", "rate_take", [keys.tool_rate("app", unique)]),
        ("gate", "slot_take", [keys.tool_slots("app", unique)]),  # and its calls at once (D111)
        ("timer", "slot_take", [keys.tool_slots("app", unique)]),
        # The bank's credential holds no lease.
        ("bank", "lease_acquire", [keys.lease(task), keys.fence(task)]),
        # The relay keeps the task index, and reaches no lease or action log with its function right.
        ("relay", "lease_acquire", [keys.lease(task), keys.fence(task)]),
        ("relay", "action_begin", [keys.ops(task), keys.lease(task)]),
        ("relay", "index_apply", [keys.ops(task), keys.lease(task)]),
        # The executor reaches the bank only through the bank's credential.
        (
            "executor",
            "bank_refund",
            [bank.entry_key(op), bank.fence_key(task), bank.faults_key(task), bank.LEDGER],
        ),
    ]
    for role, name, names in refused:
        answer = redis_cli(
            settings, role, "FCALL", f"{library.LIBRARY}_{name}", str(len(names)), *names, "1", "{}", ""
        )
        assert answer.startswith("NOPERM"), (role, name, answer)
    for role in ("inbound", "proposer", "ingress"):  # no FCALL at all, not even keyless
        answer = redis_cli(settings, role, "FCALL", library.of(settings).identity.qualified, "0")
        assert answer.startswith("NOPERM"), (role, answer)
    touched = [bank.entry_key(op), bank.fence_key(task), keys.ops(task), keys.lease(task), keys.fence(task)]
    assert redis_client.exists(*touched) == 0


def test_a_tools_calls_are_counted_over_every_caller_and_one_over_its_rate_is_not_counted(
    settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    first, second = acl.connect(settings, "executor"), acl.connect(settings, "executor")
    tool = ("rates", f"tool-{unique}")
    # A burst of 3 at one call a second: three go at once, from either executor; the fourth waits.
    waits = [rates.take(executor, *tool, 1.0, 3) for executor in (first, second, first, second)]
    assert waits[:3] == [0.0, 0.0, 0.0] and 0 < waits[3] <= 1.0, waits
    again = rates.take(first, *tool, 1.0, 3)  # a call that waited took no turn: no later than before
    assert 0 < again <= waits[3], (again, waits)
    assert process.wait_until(lambda: rates.take(second, *tool, 1.0, 3) == 0.0, 10)  # its turn comes
    assert 0 < redis_client.pttl(keys.tool_rate(*tool)) <= 4000  # the count lapses once the tool is quiet


def test_a_tools_count_planted_far_ahead_holds_it_no_longer_than_a_burst(
    settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    executor = acl.connect(settings, "executor")
    tool = ("rates", f"planted-{unique}")
    redis_client.set(keys.tool_rate(*tool), str(10**18), px=60_000)  # a count moved far forward
    wait = rates.take(executor, *tool, 2.0, 1)
    assert 0 < wait <= 0.5, wait  # one interval at most: read as a full burst, not a wait of years
    redis_client.set(keys.tool_rate(*tool), "not a number", px=60_000)
    assert rates.take(executor, *tool, 2.0, 1) == 0.0  # unreadable: read as a quiet tool, one burst


def test_a_tools_calls_at_once_are_counted_over_every_caller_and_a_slot_left_behind_lapses(
    settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    first, second = acl.connect(settings, "executor"), acl.connect(settings, "executor")
    tool = ("slots", f"tool-{unique}")
    taken = [
        rates.slot_take(ex, *tool, f"op-{i}", most=2, ttl_ms=60_000)
        for i, ex in enumerate((first, second, first))
    ]
    assert taken == [True, True, False]  # two at once, from either executor; the third waits
    assert rates.slot_take(second, *tool, "op-0", most=2, ttl_ms=60_000)  # its own again: a renewal
    assert redis_client.zcard(keys.tool_slots(*tool)) == 2
    rates.slot_give_back(first, *tool, "op-1")  # a call's end frees its slot
    assert rates.slot_take(second, *tool, "op-2", most=2, ttl_ms=200)
    assert not rates.slot_take(first, *tool, "op-3", most=2, ttl_ms=200)
    # op-2's executor died: its slot lapses after its ttl. The key lapses no later than its last slot.
    assert process.wait_until(lambda: rates.slot_take(first, *tool, "op-3", most=2, ttl_ms=200), 10)
    assert 0 < redis_client.pttl(keys.tool_slots(*tool)) <= 60_000
    rates.slot_give_back(first, *tool, "op-0")
    rates.slot_give_back(first, *tool, "op-3")
    assert not redis_client.exists(keys.tool_slots(*tool))  # the last given back: nothing left


def test_a_tools_slot_planted_far_ahead_holds_it_no_longer_than_an_hour(
    settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    executor = acl.connect(settings, "executor")
    tool = ("slots", f"planted-{unique}")
    redis_client.zadd(keys.tool_slots(*tool), {"planted": 10**15})  # a slot said to live for ever
    assert rates.slot_take(executor, *tool, "op-1", most=1, ttl_ms=60_000)  # read as lapsed
    assert redis_client.zrange(keys.tool_slots(*tool), 0, -1) == [b"op-1"]
    rates.slot_give_back(executor, *tool, "op-1")


# ---- a private Redis, restarted without wakeful reloading anything --------------------------------


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> Iterator[Settings]:
    """Its own state dir and port, started by `dev up`'s Redis half; stopped at the end."""
    (port,) = free_ports(1)
    mine = replace(
        settings,
        home=tmp_path_factory.mktemp("functions-home"),
        redis_port=port,
        redis_url_external=None,
    )
    mine = replace(mine, secrets=mine.home / "secrets", keyring=mine.home / "keyring.json")
    redis_server.start(mine, lambda _line: None)
    yield mine
    redis_server.stop(mine)


def _start_bare(settings: Settings) -> None:
    """redis-server with the config `dev up` wrote, and nothing loaded afterwards."""
    home = settings.home / "redis"
    conf = home / "redis.conf"
    process.start_detached(
        [redis_server.binary(lambda _line: None), str(conf)],
        home / "stdout.log",
        redis_server.pid_path(settings),
        home,
    )
    admin = acl.connect(settings, "admin")

    def ready() -> bool:
        try:
            return bool(admin.ping())
        except (redis.ConnectionError, redis.BusyLoadingError):
            return False

    assert process.wait_until(ready, DEADLINE_S), process.log_tail(redis_server.log_path(settings))


def test_functions_survive_a_redis_restart(private: Settings, unique: str) -> None:
    task = f"t-{unique}"
    leases = Leases(acl.connect(private, "executor"), owner="before-restart")
    lease = leases.acquire(task)
    actions = ActionLog(acl.connect(private, "executor"))
    begun = actions.begin(task, f"REFUND:{task}:v1", lease.fence, lease.token)
    booked = Bank(downstream_as(private, "bank")).refund(f"REFUND:{task}:v1", task, 100, "EUR", lease.fence)
    # Written by functions as role users; Redis 7.0 replays them from the AOF as the default user.
    assert redis_server.stop(private)
    _start_bare(private)
    library.check(
        acl.connect(private, "executor"), private
    )  # the library came back with the data, loaded by nobody
    assert leases.extend(lease).fence == lease.fence
    assert actions.lookup(task, f"REFUND:{task}:v1") == begun.entry
    assert Bank(downstream_as(private, "bank")).lookup(f"REFUND:{task}:v1") == booked
    assert leases.acquire(f"{task}-next").fence == 1


def test_a_role_without_the_library_waits_and_worker_stops_in_one_line(
    private: Settings, settings: Settings
) -> None:
    admin = acl.connect(private, "admin")
    admin.function_delete(library.LIBRARY)
    try:
        with pytest.raises(FunctionsMissing, match="wakeful dev up") as info:
            Leases(acl.connect(private, "executor")).acquire("t-nolibrary")
        assert isinstance(info.value, Retry), "a missing library must not dead-letter messages"
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEFUL_")}
        env.update(
            WAKEFUL_HOME=str(private.home),
            WAKEFUL_REDIS_PORT=str(private.redis_port),
            WAKEFUL_KAFKA_PORT=str(settings.kafka_port),
            WAKEFUL_KAFKA_CONTROLLER_PORT=str(settings.kafka_controller_port),
        )
        result = subprocess.run(
            [sys.executable, "-m", "wakeful.cli.main", "worker", "executor"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode != 0
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "wakeful dev up" in lines[0] and "wakeful admin acl --apply" in lines[0], (
            lines
        )
        # Another build's library under this name is told apart from this code's.
        identity = library.of(settings).identity.qualified
        admin.function_load(
            f"#!lua name={library.LIBRARY}\nredis.register_function{{function_name="
            f"'{identity}', callback=function() return 'other' end, flags={{'no-writes'}}}}"
        )
        with pytest.raises(FunctionsMissing, match="another"):
            library.check(acl.connect(private, "executor"), private)
    finally:
        library.load(admin, private)
    library.check(acl.connect(private, "executor"), private)
