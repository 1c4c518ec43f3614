"""The two files an offline audit reads (D72): a task's log messages, written by `wakeful log export`,
and the public keys, written by `wakeful keys export`. Pure: no Kafka, no Redis.

Log file: one JSON object per line, one wakeful.log message each, as it was on the topic:
    {"topic", "partition", "offset", "headers": [[name, base64 of its value]], "value": text}
(`value_base64` in place of `value` for a value that is not UTF-8 text). A line's value may be
edited by anyone who holds the file: the audit trusts nothing in it but what the signatures cover.

Keys file: one JSON object
    {"log_keys": {key id: base64 of the Ed25519 public key},
     "signers": {key id: {"alg", "public" (base64; absent for an HMAC signer: its secret is no
                 public key), "principal", "tenant", "kinds"}}}
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from wakeful.core.errors import DecodeError
from wakeful.schemas.signatures import VerifyKey

HMAC = "hmac-sha256"


@dataclass(frozen=True)
class Logged:
    """One wakeful.log message as read: where it was, its headers, its value."""

    topic: str
    partition: int
    offset: int
    headers: tuple[tuple[str, bytes], ...]
    value: bytes

    @property
    def where(self) -> str:
        return f"{self.partition}:{self.offset}"


@dataclass(frozen=True)
class Signer:
    """A signer of events as exported: its public key, or None for an HMAC signer."""

    key_id: str
    alg: str
    public: bytes | None
    principal: str
    tenant: str

    def verify_key(self) -> VerifyKey | None:
        if self.alg == HMAC or self.public is None:
            return None
        return VerifyKey(self.key_id, "ed25519", self.public, self.principal, self.tenant)


@dataclass(frozen=True)
class PublicKeys:
    log_keys: dict[str, bytes]
    signers: dict[str, Signer]


def message_line(m: Logged) -> bytes:
    doc: dict[str, Any] = {
        "topic": m.topic,
        "partition": m.partition,
        "offset": m.offset,
        "headers": [[name, base64.b64encode(raw).decode()] for name, raw in m.headers],
    }
    try:
        doc["value"] = m.value.decode("utf-8")
    except UnicodeDecodeError:
        doc["value_base64"] = base64.b64encode(m.value).decode()
    return orjson.dumps(doc) + b"\n"


def read_messages(lines: Iterable[bytes]) -> Iterator[Logged]:
    """The messages of a log file; DecodeError names the line that is not one."""
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
            value = (
                doc["value"].encode("utf-8")
                if "value" in doc
                else base64.b64decode(doc["value_base64"], validate=True)
            )
            headers = tuple((str(k), base64.b64decode(v, validate=True)) for k, v in doc["headers"])
            yield Logged(str(doc["topic"]), int(doc["partition"]), int(doc["offset"]), headers, value)
        except (
            orjson.JSONDecodeError,
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
            binascii.Error,
        ) as exc:
            raise DecodeError(
                "log_line", line[:200], f"line {n} is not an exported log message: {exc!r}"
            ) from exc


def keys_doc(
    log_keys: Mapping[str, bytes], signers: Iterable[VerifyKey], kinds: Mapping[str, Iterable[str]]
) -> bytes:
    out: dict[str, Any] = {
        "log_keys": {kid: base64.b64encode(k).decode() for kid, k in sorted(log_keys.items())},
        "signers": {},
    }
    for key in sorted(signers, key=lambda k: k.key_id):
        entry: dict[str, Any] = {
            "alg": key.alg,
            "principal": key.principal,
            "tenant": key.tenant,
            "kinds": sorted(kinds.get(key.key_id, ())),
        }
        if key.alg != HMAC:
            entry["public"] = base64.b64encode(key.material).decode()
        out["signers"][key.key_id] = entry
    return orjson.dumps(out, option=orjson.OPT_INDENT_2)


def read_keys(raw: bytes) -> PublicKeys:
    """The keys file; DecodeError says what is wrong with it."""
    try:
        doc = orjson.loads(raw)
        log_keys = {kid: base64.b64decode(b64, validate=True) for kid, b64 in doc["log_keys"].items()}
        signers = {
            kid: Signer(
                kid,
                str(s["alg"]),
                base64.b64decode(s["public"], validate=True) if "public" in s else None,
                str(s["principal"]),
                str(s["tenant"]),
            )
            for kid, s in doc["signers"].items()
        }
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, binascii.Error) as exc:
        raise DecodeError(
            "public_keys", raw[:200], f"not a keys file from `wakeful keys export`: {exc!r}"
        ) from exc
    return PublicKeys(log_keys, signers)
