"""Token counts kept before the stream counters are moved into them by the admin once (D51): a task
asleep across the upgrade keeps what it spent, and a second run moves nothing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import redis

from wakeful.state import keys, upgrades
from wakeful.state.budget import Account, Budget, Limits


def test_counts_from_before_the_streams_are_added_to_them_once_and_the_old_keys_go(
    redis_client: redis.Redis,
) -> None:
    task_id, tenant = f"t-{uuid.uuid4().hex[:12]}", f"up-{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC)
    account = Account.at(task_id, tenant, now)
    yesterday = Account.at(task_id, tenant, now - timedelta(days=1)).day
    redis_client.set(keys.tokens(task_id), 60)
    redis_client.xadd(account.task_key, {"n": 40}, id="40-0")  # charged since the upgrade began
    redis_client.set(keys.tenant_tokens(tenant, account.day), 900)
    redis_client.set(keys.tenant_tokens(tenant, yesterday), 5000)  # a day gone by: counts for nothing now
    damaged = keys.tokens(f"{task_id}-x")
    redis_client.set(damaged, "12abc")
    try:
        said = upgrades.run(redis_client)
        assert Budget(redis_client, Limits(0, 0)).usage(account) == (100, 900)
        assert not redis_client.exists(keys.tokens(task_id), keys.tenant_tokens(tenant, account.day))
        assert not redis_client.exists(keys.tenant_tokens(tenant, yesterday))
        assert f"kept {damaged}: it does not hold a count of tokens" in said  # never lost, and said
        assert redis_client.get(damaged) == b"12abc"
        assert [line for line in upgrades.run(redis_client) if "moved" in line] == []  # once
        assert Budget(redis_client, Limits(0, 0)).usage(account) == (100, 900)
    finally:
        redis_client.delete(damaged, account.tenant_key)
