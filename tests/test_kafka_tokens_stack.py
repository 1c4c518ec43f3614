"""Kafka delegation tokens as per-step credentials, on the real stack (D123). The test process plays
the executor of notice_app, whose `announce` tool declares `credential = "notices"`: its minter makes
a token owned by the notices downstream's principal for a step that is running, and for nothing
else. The token writes the downstream's topic and no other; it stops working when its step ends,
when its lifetime passes, and when `wakeful authority credentials revoke` names it; its HMAC is in
no Redis key the minter may write."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from cli_run import wakeful
from kafka import KafkaProducer
from notice_app import TOPIC, app

from wakeful.consumers.executor import credentials
from wakeful.core import topics
from wakeful.core.log import Log
from wakeful.core.minting import Credential
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.producers.kafka_tokens import login
from wakeful.sdk.tools import ToolUnavailable
from wakeful.state import keys, minted

TESTS = Path(__file__).parent
GONE_S = 20.0  # a token ended, revoked or past its lifetime is refused within this
FENCE = 7
TOOL = next(t for t in app.tools if t.credential == "notices")
pytestmark = pytest.mark.timeout(240)


@pytest.fixture()
def minting(settings: Settings) -> Iterator[Settings]:
    """This process as notice_app's executor, with its minter started (tests/ on its import path)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "PYTHONPATH", os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(TESTS)) if p)
        )
        ours = replace(settings, app="notice_app:app")
        credentials.start(ours, app, Log(role="executor"))
        yield ours


def running_step(client: Client) -> tuple[str, str]:
    """A task whose `announce` step is running: its lease at FENCE, its intent in flight."""
    task_id = f"t-notice-{uuid.uuid4().hex[:10]}"
    op_key = f"ANNOUNCE:{task_id}:v1"
    intent = {"status": "in_flight", "tool": TOOL.name, "fence": FENCE, "task_id": task_id}
    client.admin.set(keys.lease(task_id), f"w-test:{FENCE}")
    client.admin.hset(keys.ops(task_id), op_key, orjson.dumps(intent))
    return task_id, op_key


def works(made: Credential, topic: str = TOPIC) -> bool:
    producer = None
    try:  # any refusal: no login, no metadata, not authorized
        producer = KafkaProducer(
            **login(made), max_block_ms=2000, request_timeout_ms=3000, bootstrap_timeout_ms=3000
        )
        producer.send(topic, key=b"probe", value=b"probe").get(timeout=5)
    except Exception:
        return False
    finally:
        if producer is not None:
            producer.close(timeout=0)
    return True


def test_a_steps_token_writes_its_downstreams_topic_alone_and_is_refused_once_the_step_ends(
    client: Client, minting: Settings
) -> None:
    task_id, op_key = running_step(client)
    with credentials.minted(TOOL, task_id, op_key, FENCE) as made:
        assert made is not None and made.bootstrap
        assert works(made), "the step's token cannot write its downstream's topic"
        assert not works(made, topics.EVENTS), "a token wrote a topic outside its downstream"
        [record] = minted.listing(client.admin, task_id)
        assert (record["user"], record["scope"], record["fence"]) == (made.user, "notices", FENCE)
        # The minter's Redis user may write these two keys and no other (state/acl.py): the HMAC is
        # in neither (the full scan of every value: test_credentials_stack, for the Redis provider).
        written = repr(client.admin.hgetall(keys.MINTED)) + repr(client.admin.zrange(keys.MINTED_DUE, 0, -1))
        assert made.password not in written, "a token's HMAC is in Redis"
    assert wait_until(lambda: not works(made), GONE_S), "a token outlived its step"
    assert minted.listing(client.admin, task_id) == []


def test_no_token_is_made_for_a_step_that_is_not_running(client: Client, minting: Settings) -> None:
    task_id, op_key = running_step(client)
    with (
        pytest.raises(ToolUnavailable, match="not held at fence"),
        credentials.minted(TOOL, task_id, op_key, FENCE + 1),
    ):
        pass  # a stale fence: another worker holds the task now
    assert minted.listing(client.admin, task_id) == []


def test_a_token_is_refused_after_its_lifetime_with_its_step_still_running(
    client: Client, minting: Settings
) -> None:
    short = replace(minting, credential_ttl_s=3)
    credentials.start(short, app, Log(role="executor"))  # a minter for the shorter lifetime
    task_id, op_key = running_step(client)
    with credentials.minted(TOOL, task_id, op_key, FENCE) as made:
        assert made is not None and works(made)
        assert wait_until(lambda: not works(made), GONE_S), "a token outlived its lifetime"


def test_a_revoked_token_is_refused_mid_step(client: Client, minting: Settings) -> None:
    task_id, op_key = running_step(client)
    with credentials.minted(TOOL, task_id, op_key, FENCE) as made:
        assert made is not None and works(made)
        revoked = wakeful("authority", "credentials", "revoke", made.user, "--by", "ops-lead")
        assert revoked.returncode == 0, revoked.stderr
        assert wait_until(lambda: not works(made), GONE_S), "a revoked token still works"
