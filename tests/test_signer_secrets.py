"""HMAC signer secrets at rest, attacked with each role's own Redis password: a role that verifies
no HMAC reads no usable secret from the signer registry, and a webhook forged with what the door's
read-only login reads is refused (docs/decisions.md D91). A registry written by the release before
(each secret whole in `material`) is resealed by `wakeful authority signers seal`, and its keys
still verify, before and after."""

from __future__ import annotations

import base64
import contextlib
import time
import uuid
from collections.abc import Iterator

import httpx
import orjson
import pytest
import redis
from cli_run import wakeful
from helpers import ingress_door

from wakeful.authority import signer_seal
from wakeful.authority.snapshot import decode_signer
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.devstack import stack
from wakeful.operate.client import Client
from wakeful.schemas import events, webhook
from wakeful.state import acl, keys

VICTIM, LEGACY = "hooks-payroll", "hooks-legacy"
ROLES = ("inbound", "gate", "proposer", "executor", "timer", "relay", "ingress")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def door(client: Client) -> Iterator[str]:
    with ingress_door() as url:
        yield url


@pytest.fixture(scope="module")
def victim(client: Client) -> bytes:
    """An HMAC sender registered as an operator does; its secret as the sender holds it."""
    _, path = client.add_hmac_signer(VICTIM, (events.CREATE, events.RUN))
    return bytes.fromhex(path.read_text().strip())


def webhook_post(door: str, secret: bytes, key_id: str) -> httpx.Response:
    task = f"forged-{uuid.uuid4().hex[:10]}"
    body = orjson.dumps(
        {"event_id": f"wh-{uuid.uuid4().hex}", "kind": events.CREATE, "task_id": task, "payload": {}}
    )
    headers = {
        "Content-Type": "application/json",
        webhook.KEY_HEADER: key_id,
        webhook.SIGNATURE_HEADER: webhook.header(secret, int(time.time()), body),
    }
    return httpx.post(f"{door}/v1/webhooks", content=body, headers=headers, timeout=15)


def readable(settings: Settings, role: str, key_id: str) -> bytes | None:
    """The registry record `role`'s own Redis login reads for `key_id` (None: refused or absent)."""
    try:
        raw = acl.connect(settings, role).hget(keys.AUTH_SIGNERS, key_id)
    except redis.exceptions.NoPermissionError:
        return None
    return raw if isinstance(raw, bytes) else None


def candidates(record: bytes) -> list[bytes]:
    """Every secret a thief could try from a record: each string field, as text and base64-decoded."""
    found: list[bytes] = []
    for value in orjson.loads(record).values():
        if isinstance(value, str):
            found.append(value.encode())
            with contextlib.suppress(ValueError):
                found.append(base64.b64decode(value, validate=True))
    return found


@pytest.mark.parametrize("role", ROLES)
def test_no_role_login_reads_a_usable_hmac_secret_from_the_signer_registry(
    settings: Settings, victim: bytes, role: str
) -> None:
    record = readable(settings, role, f"hmac-{VICTIM}")
    if record is None:
        return  # the role may not read the registry at all
    shown = [victim, victim.hex().encode(), base64.b64encode(victim)]
    assert not any(s in record for s in shown), f"{role}'s login reads the secret whole: {record[:80]!r}"
    assert victim not in candidates(record)


def test_a_webhook_forged_with_what_the_doors_login_reads_is_refused(
    settings: Settings, door: str, victim: bytes, redis_client: redis.Redis
) -> None:
    record = readable(settings, "ingress", f"hmac-{VICTIM}")
    assert record is not None, "the door's login reads the signer's record (it verifies webhooks)"
    tried = candidates(record)
    assert tried
    for guess in tried:
        answer = webhook_post(door, guess, f"hmac-{VICTIM}")
        assert answer.status_code == 401, (guess[:40], answer.status_code, answer.text)
    # The real sender is still heard: the door opens the sealed secret it needs.
    assert webhook_post(door, victim, f"hmac-{VICTIM}").status_code == 202


def test_a_registry_of_the_release_before_is_resealed_and_its_keys_still_verify(
    client: Client, settings: Settings, door: str, redis_client: redis.Redis
) -> None:
    secret = uuid.uuid4().bytes * 2
    old = {
        "principal": f"principal:{LEGACY}",
        "alg": "hmac-sha256",
        "material": base64.b64encode(secret).decode(),
        "kinds": [events.CREATE],
        "tenant": "default",
    }
    key_id = f"hmac-{LEGACY}"
    redis_client.hset(keys.AUTH_SIGNERS, key_id, orjson.dumps(old))
    try:
        assert webhook_post(door, secret, key_id).status_code == 202  # read in its old shape
        done = wakeful("authority", "signers", "seal")
        assert done.returncode == 0, done.stderr
        assert "resealed 1 " in done.stdout + done.stderr, done
        stored = redis_client.hget(keys.AUTH_SIGNERS, key_id)
        assert isinstance(stored, bytes)
        doc = orjson.loads(stored)
        assert "material" not in doc and doc["sealed"], doc
        assert secret not in candidates(stored)
        # The door keeps a record a second: past it, it reads the sealed one and still verifies.
        assert wait_until(lambda: webhook_post(door, secret, key_id).status_code == 202, 10, interval=0.3)
        assert webhook_post(door, base64.b64decode(doc["sealed"].split(":")[-1]), key_id).status_code == 401
    finally:
        redis_client.hdel(keys.AUTH_SIGNERS, key_id)


def test_dev_up_seals_a_record_of_the_release_before_and_keeps_an_ed25519_one_as_it_is(
    settings: Settings, redis_client: redis.Redis
) -> None:
    secret, key_id, public = uuid.uuid4().bytes * 2, f"hmac-{LEGACY}-up", f"key-{LEGACY}-up"
    plain = {"principal": LEGACY, "alg": "hmac-sha256", "kinds": [events.CREATE], "tenant": "default"}
    ed = {**plain, "alg": "ed25519", "material": base64.b64encode(bytes(32)).decode()}
    redis_client.hset(
        keys.AUTH_SIGNERS, key_id, orjson.dumps({**plain, "material": base64.b64encode(secret).decode()})
    )
    redis_client.hset(keys.AUTH_SIGNERS, public, orjson.dumps(ed))
    said: list[str] = []
    try:
        stack.reseal_signers(settings, said.append)  # what `wakeful dev up` runs once Redis is up
        stored = redis_client.hget(keys.AUTH_SIGNERS, key_id)
        assert isinstance(stored, bytes) and secret not in candidates(stored), stored
        assert any("sealed" in line for line in said), said
        assert orjson.loads(redis_client.hget(keys.AUTH_SIGNERS, public) or b"{}") == ed
        inbound = signer_seal.load(settings, "inbound")
        assert decode_signer(key_id, stored, inbound)[0].material == secret  # a verifier still opens it
        assert decode_signer(key_id, stored)[0].material == b""  # a role without the seal does not
    finally:
        redis_client.hdel(keys.AUTH_SIGNERS, key_id, public)
