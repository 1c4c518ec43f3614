"""The minter's Kafka lane (D123), on the real Redis: while a broker takes its time over a step's
token (here one that accepts connections and never answers), the minter answers a Redis user's
mint at once, and the token's step gets its answer (no token) from the lane once the broker's
wait is over, on its own connection; nothing of the token is kept."""

from __future__ import annotations

import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
import redis

from wakeful.consumers.minter.main import Minter, serve
from wakeful.core.minting import TIMEOUT_S
from wakeful.core.settings import Settings
from wakeful.state import acl, keys, minted

TESTS = Path(__file__).parent
FENCE = 7
pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def silent_broker() -> Iterator[str]:
    """A listener that takes every connection and answers nothing: a broker that does not answer."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def take() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def running(admin: redis.Redis, tool: str) -> tuple[str, str]:
    task_id = f"t-lane-{uuid.uuid4().hex[:10]}"
    op_key = f"{tool.upper()}:{task_id}:v1"
    admin.set(keys.lease(task_id), f"w-test:{FENCE}")
    intent = {"status": "in_flight", "tool": tool, "fence": FENCE, "task_id": task_id}
    admin.hset(keys.ops(task_id), op_key, orjson.dumps(intent))
    return task_id, op_key


def ask(conn: socket.socket, scope: str, tool: str, task_id: str, op_key: str) -> None:
    grant = {"op": "mint", "scope": scope, "tool": tool, "task_id": task_id, "op_key": op_key, "fence": FENCE}
    conn.sendall(orjson.dumps(grant) + b"\n")


def test_a_broker_that_does_not_answer_holds_up_no_redis_users_mint(
    settings: Settings, redis_client: redis.Redis, silent_broker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(TESTS))  # notice_app: a tool whose credential is the notices downstream
    ours = replace(settings, app="notice_app:app", kafka_bootstrap_external=silent_broker)
    assert ours.kafka_bootstrap == silent_broker
    minter = Minter(ours, acl.connect(ours, "minter", timeout=10))
    assert minter.lane is not None
    minter.scopes["refund"] = "bank"  # and a tool of the bank, a Redis downstream, beside it
    path = str(Path(tempfile.mkdtemp(prefix="wakeful-lane-")) / "minter.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    server.setblocking(False)
    stop = threading.Event()
    serving = threading.Thread(target=serve, args=(minter, server, stop), daemon=True)
    serving.start()
    token_step, user_step = (socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2))
    try:
        for conn in (token_step, user_step):
            conn.settimeout(3 * TIMEOUT_S)
            conn.connect(path)
        token_task, token_op = running(redis_client, "announce")
        user_task, user_op = running(redis_client, "refund")
        ask(token_step, "notices", "announce", token_task, token_op)
        started = time.monotonic()
        ask(user_step, "bank", "refund", user_task, user_op)
        said = orjson.loads(user_step.makefile("rb").readline())
        answered_s = time.monotonic() - started
        assert said.get("ok") is True and str(said["user"]).startswith("wkc-"), said
        assert answered_s < TIMEOUT_S / 2, f"the Redis mint waited {answered_s:.1f} s behind the broker"
        # the token's step is answered on its own connection once the broker's wait is over: no token
        lane_said = orjson.loads(token_step.makefile("rb").readline())
        assert lane_said["ok"] is False and "Kafka made no token" in lane_said["error"], lane_said
        assert time.monotonic() - started < TIMEOUT_S, "the broker's wait is bounded under the executor's"
        assert not minter.kafka.hmacs  # no token is held
        assert minted.listing(redis_client, token_task) == []  # and none is recorded for its step
    finally:
        stop.set()
        serving.join(10)
        assert minter.lane.stop()
        minted.end(minter.client, sorted(minter.mine))
        for conn in (token_step, user_step, server):
            conn.close()
