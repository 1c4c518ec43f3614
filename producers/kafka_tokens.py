"""Kafka delegation tokens (D123): the per-step credential of a tool that produces to a cluster.

A token authenticates as its owner, a principal that exists only in ACLs (`User:wakeful-dt-<name>`,
with no password anywhere): what the token may do is what the owner's ACLs allow. The minter
creates each token for the owner (CreateDelegationToken v3, which names an owner other than the
requester; the minter's principal holds CREATE_TOKENS on the owner), with itself as renewer, so
that it can expire the token early: when the step ends, or when `wakeful authority credentials
revoke` removed its record. A token's lifetime is capped by the request, so an unended one stops
working by itself.

A client logs in with a token by SCRAM, its id as the user and its HMAC (base64) as the password,
and the extension `tokenauth=true` in its first message: `login` gives kafka-python that
login. Neither confluent-kafka nor kafka-python has the token requests (create, expire), so they are
declared here, as kafka-python's message classes (their schemas in producers/kafka_messages/).
"""

from __future__ import annotations

import base64
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from kafka.admin import KafkaAdminClient
from kafka.errors import for_code
from kafka.net.sasl import register_sasl_mechanism
from kafka.net.sasl.scram import SaslMechanismScram, ScramClient
from kafka.protocol.api_message import ApiMessage

from wakeful.core.minting import Credential
from wakeful.producers import kafka_messages

MECHANISM = "SCRAM-SHA-512"  # what a token logs in with (the broker keeps tokens' SCRAM credentials)


def _message(name: str) -> Any:
    """The kafka-python message class `name`, its schema read from producers/kafka_messages/."""
    return type(name, (ApiMessage,), {}, load_json=kafka_messages)


CreateDelegationTokenRequest = _message("CreateDelegationTokenRequest")
CreateDelegationTokenResponse = _message("CreateDelegationTokenResponse")  # kafka-python reads replies by it
ExpireDelegationTokenRequest = _message("ExpireDelegationTokenRequest")
ExpireDelegationTokenResponse = _message("ExpireDelegationTokenResponse")


class TokenRefused(Exception):
    """The broker would not make, find or expire a token: its error, named."""


@dataclass(frozen=True)
class Token:
    """A delegation token: its id (the login's user), its HMAC (the login's password, base64), its
    owner's name and when it ends (epoch ms). Its repr hides the HMAC."""

    token_id: str
    hmac: str = field(repr=False)
    owner: str
    expires_ms: int


def _checked(response: Any, what: str) -> Any:
    if response.error_code:
        error = for_code(response.error_code)
        raise TokenRefused(f"{what}: {error.__name__} ({getattr(error, 'description', '')})")
    return response


class Tokens:
    """Token requests over one kafka-python admin connection, logged in as `login` (its keyword
    arguments, core/kafka_auth.kafka_python_config): the minter's, or the admin's."""

    def __init__(self, login: dict[str, Any], timeout_ms: int = 10_000) -> None:
        # `timeout_ms` bounds finding the cluster too: kafka-python waits 30 s for a broker that
        # takes the connection and says nothing, whatever a request's own timeout is
        self.admin = KafkaAdminClient(**login, request_timeout_ms=timeout_ms, bootstrap_timeout_ms=timeout_ms)
        self.name = str(login.get("sasl_plain_username", ""))
        self._lock = threading.Lock()

    def _send(self, request: Any) -> Any:
        manager = self.admin._manager  # kafka-python has no public call for a request of its own
        with self._lock:
            return manager.run(manager.send, request)

    def create(self, owner: str, renewers: list[str], lifetime_ms: int) -> Token:
        """A new token owned by `owner`, renewable (so expirable) by `renewers` (principal names),
        ending after `lifetime_ms` at the latest."""
        request = CreateDelegationTokenRequest(
            owner_principal_type="User",
            owner_principal_name=owner,
            renewers=[("User", name) for name in renewers],
            max_lifetime_ms=lifetime_ms,
        )
        made = _checked(self._send(request), f"no token for User:{owner}")
        hmac = base64.b64encode(made.hmac).decode()
        return Token(
            made.token_id, hmac, made.principal_name, min(made.expiry_timestamp_ms, made.max_timestamp_ms)
        )

    def expire(self, hmac: str) -> None:
        """End a token now (this login must be its owner or a renewer); one already gone is no error."""
        request = ExpireDelegationTokenRequest(hmac=base64.b64decode(hmac), expiry_time_period_ms=-1)
        response = self._send(request)
        if response.error_code and for_code(response.error_code).__name__ != "DelegationTokenNotFoundError":
            _checked(response, "the token was not expired")

    def close(self) -> None:
        self.admin.close()


# The tokens handed to this process's tools, the latest HANDED: a SCRAM login whose user is one of
# them is a token's (a token lives minutes, so one this old is over anyway).
HANDED = 4096
_handed: OrderedDict[str, None] = OrderedDict()
_handed_lock = threading.Lock()


class _TokenScram(SaslMechanismScram):  # type: ignore[misc]
    """kafka-python's SCRAM, with `tokenauth=true` in the first message for a token's login."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        with _handed_lock:
            token = config.get("sasl_plain_username") in _handed
        if token:
            self._scram_client = _TokenClient(
                config["sasl_plain_username"], config["sasl_plain_password"], config["sasl_mechanism"]
            )


class _TokenClient(ScramClient):  # type: ignore[misc]
    def first_message(self) -> bytes:
        # the extension is part of the first message, so of what both sides sign (RFC 5802)
        bare: bytes = b"n=" + self.user + b",r=" + self.nonce + b",tokenauth=true"
        self.auth_message += bare
        return b"n,," + bare


register_sasl_mechanism(MECHANISM, _TokenScram, overwrite=True)
# kafka-python warns at every SCRAM login on SASL_PLAINTEXT; a step's producer logs in once a step,
# and the transport is the deployment's choice (WAKEFUL_KAFKA_SECURITY), said once in its docs.
logging.getLogger("kafka.net.sasl.scram").setLevel(logging.ERROR)


def producer_config(
    bootstrap: str, token_id: str, hmac: str, security: str = "SASL_PLAINTEXT"
) -> dict[str, Any]:
    """kafka-python keyword arguments that log in with a token (a KafkaProducer's, say)."""
    with _handed_lock:
        _handed[token_id] = None
        while len(_handed) > HANDED:
            _handed.popitem(last=False)
    return {
        "bootstrap_servers": bootstrap,
        "security_protocol": security,
        "sasl_mechanism": MECHANISM,
        "sasl_plain_username": token_id,
        "sasl_plain_password": hmac,
    }


def login(made: Credential) -> dict[str, Any]:
    """A Kafka downstream's step credential (sdk `credential()`) as kafka-python's keyword arguments
    (a KafkaProducer's): its delegation token's login to the cluster it was made in."""
    if not made.bootstrap:
        raise LookupError(f"{made.user} is a Redis user, not a Kafka downstream's token")
    return producer_config(made.bootstrap, made.user, made.password, made.security or "SASL_PLAINTEXT")


__all__ = [
    "MECHANISM",
    "Token",
    "TokenRefused",
    "Tokens",
    "login",
    "producer_config",
]
