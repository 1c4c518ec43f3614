"""A step's own Redis connection (state/stepped.py, D120) on the real stack: it logs in with the
step's first command and out at its end, and one the server closed while it idled (a Redis
restart, a CLIENT KILL) is opened again, logged in as the next step, with no step failing for it."""

from __future__ import annotations

import threading
import uuid

import orjson
import redis

from wakeful.consumers.executor import credentials
from wakeful.core.log import Log
from wakeful.core.settings import Settings
from wakeful.examples.refund import app as refund_app
from wakeful.state import keys, stepped

TOOL = refund_app.tool("refund")
FENCE = 7


def running_step(admin: redis.Redis) -> tuple[str, str]:
    """A task whose lease is held at FENCE and whose refund's intent is in flight: a step that runs."""
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    op_key = f"REFUND:{task_id}:v1"
    admin.set(keys.lease(task_id), f"w1:{FENCE}")
    intent = {"status": "in_flight", "tool": "refund", "fence": FENCE, "task_id": task_id}
    admin.hset(keys.ops(task_id), op_key, orjson.dumps(intent))
    return task_id, op_key


def step(settings: Settings, admin: redis.Redis, task_id: str, op_key: str) -> tuple[str, str]:
    """One step that reads through its own connection: the connection's id (as the admin sees it,
    while the step runs), and the user it runs as."""
    assert TOOL is not None
    with credentials.minted(TOOL, task_id, op_key, FENCE) as made, stepped.as_minted(settings) as client:
        assert made is not None
        assert client.get(f"bank:nothing:{uuid.uuid4().hex}") is None  # its first command: logged in
        [mine] = [c for c in admin.client_list() if c.get("user") == made.user]
        return str(mine["id"]), made.user


def test_a_step_connection_the_server_closed_while_idle_opens_again_as_the_next_step(
    settings: Settings, redis_client: redis.Redis
) -> None:
    credentials.start(settings, refund_app, Log(role="executor"))
    task_id, op_key = running_step(redis_client)
    first, first_user = step(settings, redis_client, task_id, op_key)
    again, again_user = step(settings, redis_client, task_id, op_key)
    assert again == first and again_user != first_user  # one connection, a login per step
    assert first_user.startswith("wkc-") and again_user.startswith("wkc-")
    redis_client.execute_command("CLIENT", "KILL", "ID", again)  # type: ignore[no-untyped-call]
    reopened, user = step(settings, redis_client, task_id, op_key)
    assert reopened != again and user.startswith("wkc-") and user not in (first_user, again_user)


def test_threads_sharing_a_steps_client_each_read_their_own_replies(
    settings: Settings, redis_client: redis.Redis
) -> None:
    """The step's one connection is taken by one command at a time: a tool that hands its client to
    threads of its own gets each reply back to the command that asked, never another's."""
    assert TOOL is not None
    credentials.start(settings, refund_app, Log(role="executor"))
    task_id, op_key = running_step(redis_client)
    names = {who: f"bank:nothing:{uuid.uuid4().hex}:{who}" for who in ("a", "b", "c")}
    for who, key in names.items():
        redis_client.set(key, who, ex=60)
    crossed: list[tuple[str, object]] = []
    with credentials.minted(TOOL, task_id, op_key, FENCE), stepped.as_minted(settings) as client:
        assert client.get(names["a"]) == b"a"  # logged in, on this thread

        def read(who: str) -> None:
            for _ in range(300):
                got = client.get(names[who])
                if got != who.encode():
                    crossed.append((who, got))

        threads = [threading.Thread(target=read, args=(who,)) for who in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads)
    assert crossed == []
