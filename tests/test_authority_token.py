"""The authority token (authority/kept.py, D79) on a real Redis and the session's fleet: every write
to authority through wakeful's stores sets a new token, a copy of authority leaves it out, and a
token planted with another type keeps nothing and stops no wake."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from helpers import BankClient

from wakeful.authority import backup, freezes
from wakeful.authority.kept import moved
from wakeful.authority.policy_store import PolicyStore
from wakeful.authority.snapshot import APP_COMPAT
from wakeful.authority.store import AuthorityStore
from wakeful.authority.tool_store import ToolStore
from wakeful.devstack.fleet import Fleet
from wakeful.state import keys

UNDER_LIMIT = 300  # closes without an approval
POLICY = "permit(principal, action, resource);\n"
KINDS = ("approval.granted",)


def _moves(client: redis.Redis, write: Callable[[], Any]) -> None:
    before = client.get(keys.AUTH_VERSION)
    write()
    after = client.get(keys.AUTH_VERSION)
    assert isinstance(after, bytes) and after != before, write


def test_every_authority_write_sets_a_new_token(redis_client: redis.Redis, unique: str) -> None:
    store, policies, tools = AuthorityStore(redis_client), PolicyStore(redis_client), ToolStore(redis_client)
    app, who, key_id = f"app{unique}", f"p{unique}", f"k{unique}"
    task_scope = freezes.scope("task", f"t-{unique}")
    known = {"t"}
    writes: list[Callable[[], Any]] = [
        lambda: store.add_approver(who, app=app),
        lambda: store.remove_approver(who, app=app),
        lambda: store.set_limit(5, app=app),
        lambda: store.set_policy(compat={"policy": "pin"}, app=app),
        lambda: store.freeze(task_scope, "ops", "test"),
        lambda: store.thaw(task_scope, "ops", "test"),
        lambda: store.register_signer(key_id, who, "ed25519", bytes(32), KINDS, known=KINDS),
        lambda: store.revoke_signer(key_id, "ops", "test"),
        lambda: store.unrevoke(who, "default", "ops", "test"),
        lambda: store.register_signer(key_id, who, "ed25519", bytes(32), KINDS, known=KINDS),
        lambda: store.remove_signer(key_id),
        lambda: policies.deploy(app, POLICY, by="ops"),
        lambda: tools.publish(app, "c1", [{"name": "t"}], "ops"),
        lambda: tools.disable(app, "t", by="ops", reason="test", known=known),
        lambda: tools.enable(app, "t", by="ops", reason="test", known=known),
    ]
    try:
        for write in writes:
            _moves(redis_client, write)
        name = keys.auth_limit(app)
        copied = {name: backup.copy(redis_client)[name]}
        redis_client.delete(name)
        _moves(redis_client, lambda: backup.put_back(redis_client, copied))
    finally:
        redis_client.delete(*redis_client.scan_iter(match=f"*{app}*"))
        redis_client.hdel(keys.AUTH_POLICY, APP_COMPAT + app)
        redis_client.hdel(keys.AUTH_TOOL_CATALOG, app)


def test_a_copy_of_authority_leaves_the_token_out_and_putting_one_back_never_writes_it(
    redis_client: redis.Redis,
) -> None:
    moved(redis_client)
    copied = backup.copy(redis_client)
    assert keys.AUTH_VERSION not in copied
    standing = redis_client.get(keys.AUTH_VERSION)
    written, _ = backup.put_back(redis_client, {keys.AUTH_VERSION: {"type": "string", "value": "AA=="}})
    assert written == [] and redis_client.get(keys.AUTH_VERSION) == standing


def test_a_token_planted_as_a_hash_keeps_nothing_and_stops_no_wake(
    client: BankClient, shared_fleet: Fleet, redis_client: redis.Redis
) -> None:
    redis_client.delete(keys.AUTH_VERSION)
    redis_client.hset(keys.AUTH_VERSION, "planted", "1")
    try:
        task_id, receipt = client.new_task(UNDER_LIMIT)
        assert receipt["status"] == "accepted", receipt
        assert client.wait_settled(task_id, 60)["stage"] == "closed"
    finally:
        redis_client.delete(keys.AUTH_VERSION)
        moved(redis_client)
