"""Makes the broker's SCRAM users and ACLs match core/kafka_rights.py, as the admin.

`wakeful dev up` runs `apply` on the local broker at every start; `wakeful admin kafka-acl --apply`
runs it on a cluster of your own. Both are safe to run again: each role's user is set to the
password in its kafka.json (made once), every ACL of the table is created, and any other ACL held
by a wakeful role's principal is deleted, so a right taken out of the table is taken away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from wakeful.core import kafka_auth, process, secrets
from wakeful.core.errors import ConfigError
from wakeful.core.kafka_auth import user_name
from wakeful.core.kafka_downstream import KafkaDownstream
from wakeful.core.kafka_rights import ADMIN, ROLES, Acl, all_acls, principal
from wakeful.core.log import librdkafka_config
from wakeful.core.settings import Settings
from wakeful.operate import token_rights
from wakeful.state import downstreams

# The broker keeps a salted hash; 8192 rounds cost a client well under a millisecond per login.
SCRAM_ITERATIONS = 8192
TIMEOUT_S = 30.0
_RESOURCE = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}
_OPERATION = {
    "read": AclOperation.READ,
    "write": AclOperation.WRITE,
    "describe_configs": AclOperation.DESCRIBE_CONFIGS,
}
# The roles whose SCRAM user wakeful sets: all but the admin, whose login is the way in (formatted
# into the local broker; on a cluster of your own, your super user).
MANAGED = tuple(role for role in ROLES if role != ADMIN)
_MECHANISM = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}


@dataclass(frozen=True)
class Applied:
    users: int
    created: int
    removed: int


def plan(settings: Settings) -> list[str]:
    """What `apply` makes, one line each; passwords stay in their files."""
    lines = [
        f"user {user_name(role)} ({settings.kafka_sasl_mechanism}; password in "
        f"{secrets.path(settings, role, kafka_auth.SECRET)})"
        for role in MANAGED
    ]
    lines.append(f"super user {user_name(ADMIN)} (the broker's super.users; not created here)")
    return lines + [str(rule) for rule in all_acls()]


def apply(settings: Settings, say: process.Say) -> Applied:
    """Set every role's SCRAM user and the table's ACLs, and the Kafka downstreams' (their owners'
    topic rights, the minter's right to make their tokens), logged in as the admin."""
    admin_config = kafka_auth.client_config(settings, ADMIN)
    passwords = {role: kafka_auth.ensure_credential(settings, role) for role in MANAGED}
    admin = AdminClient(admin_config | librdkafka_config())
    owned = downstreams.kafka(settings.downstreams)
    try:
        users = _set_users(admin, settings, passwords)
        created, removed = _set_acls(admin, owned)
    except KafkaException as exc:
        raise _refused(settings, exc) from exc
    finally:
        admin.poll(0)  # an AdminClient's log lines are written only when it is polled
    # always: a downstream taken out of the settings takes the minter's right to its tokens with it
    created += token_rights.apply(settings, [d.owner for d in owned])
    say(f"kafka: {users} SCRAM users and {created} ACLs in place ({removed} stale ACLs removed)")
    return Applied(users, created, removed)


def binding(rule: Acl) -> AclBinding:
    return AclBinding(
        _RESOURCE[rule.resource_type],
        rule.name,
        ResourcePatternType.LITERAL,
        rule.principal,
        "*",
        _OPERATION[rule.operation],
        AclPermissionType.ALLOW,
    )


def _set_users(admin: AdminClient, settings: Settings, passwords: dict[str, dict[str, str]]) -> int:
    info = ScramCredentialInfo(_MECHANISM[settings.kafka_sasl_mechanism], SCRAM_ITERATIONS)
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(cred["username"], info, cred["password"].encode())
        for cred in passwords.values()
    ]
    for future in admin.alter_user_scram_credentials(upserts, request_timeout=TIMEOUT_S).values():
        future.result()
    return len(upserts)


def owner_acls(owned: tuple[KafkaDownstream, ...]) -> list[Acl]:
    """Each Kafka downstream's owner may write its own topics, and nothing else."""
    return [Acl(f"User:{d.owner}", "topic", t, "write") for d in owned for t in d.writes]


def _set_acls(admin: AdminClient, owned: tuple[KafkaDownstream, ...] = ()) -> tuple[int, int]:
    wanted = {binding(rule) for rule in [*all_acls(), *owner_acls(owned)]}
    for future in admin.create_acls(list(wanted), request_timeout=TIMEOUT_S).values():
        future.result()
    stale: list[AclBinding] = []
    for who in [*(principal(role) for role in ROLES), *(f"User:{d.owner}" for d in owned)]:
        held = admin.describe_acls(_held_by(who), request_timeout=TIMEOUT_S).result()
        stale += [b for b in held if b not in wanted and b.restype != ResourceType.UNKNOWN]
    if stale:
        for future in admin.delete_acls([_exactly(b) for b in stale], request_timeout=TIMEOUT_S).values():
            future.result()
    return len(wanted), len(stale)


def _held_by(who: str) -> AclBindingFilter:
    anything: Any = None  # None matches any name or host; the stubs allow only str
    return AclBindingFilter(
        ResourceType.ANY,
        anything,
        ResourcePatternType.ANY,
        who,
        anything,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )


def _exactly(b: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(
        b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type
    )


def _refused(settings: Settings, exc: KafkaException) -> ConfigError:
    where = secrets.path(settings, ADMIN, kafka_auth.SECRET)
    return ConfigError(
        "Kafka",
        f"could not set the users and ACLs at {settings.kafka_bootstrap} as {user_name(ADMIN)} (credential "
        f"in {where}): {exc.args[0]}; that principal must be a super user (super.users) of the cluster",
    )
