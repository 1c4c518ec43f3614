"""Sealing in place the signer records the release before wrote whole (docs/decisions.md D91):
`wakeful dev up` and `wakeful authority signers seal` run it as the admin (a signer registered now
is written sealed: authority/store.py). Records sealed under a retired seal key are sealed under
the active one.
"""

from __future__ import annotations

import base64

import orjson
import redis

from wakeful.authority.signer_seal import HMAC, SignerSeal, sealed_record
from wakeful.state import keys
from wakeful.state.replies import hash_reply


def reseal(client: redis.Redis, seal: SignerSeal) -> tuple[int, list[str]]:
    """Seal in place every HMAC record written whole (by the release before this one) or under a
    retired seal key; each HSET is conditional on the record being unchanged meanwhile. Returns how
    many it sealed, and the key ids whose sealed secret this seal cannot open."""
    done, unopened = 0, []
    for kid_raw, raw in hash_reply(client.hgetall(keys.AUTH_SIGNERS)).items():
        key_id, doc = kid_raw.decode(), orjson.loads(raw)
        if doc.get("alg") != HMAC:
            continue
        if "sealed" in doc:
            if seal.sealed_by_active(doc["sealed"]):
                continue
            secret = seal.open(key_id, HMAC, doc["sealed"])
            if secret is None:
                unopened.append(key_id)
                continue
            doc = {
                **{k: v for k, v in doc.items() if k != "sealed"},
                "material": base64.b64encode(secret).decode(),
            }
        new = orjson.dumps(sealed_record(doc, key_id, seal))
        done += int(_swap(client, key_id, raw, new))
    return done, unopened


def _swap(client: redis.Redis, key_id: str, old: bytes, new: bytes) -> bool:
    """HSET `new` only if the record is still `old` (an operator's concurrent write stands)."""
    with client.pipeline(transaction=True) as pipe:
        try:
            pipe.watch(keys.AUTH_SIGNERS)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
            if pipe.hget(keys.AUTH_SIGNERS, key_id) != old:
                return False
            pipe.multi()
            pipe.hset(keys.AUTH_SIGNERS, key_id, new)
            pipe.execute()
            return True
        except redis.WatchError:
            return False
