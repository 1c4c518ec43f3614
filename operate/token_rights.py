"""The minter's right to make the Kafka downstreams' delegation tokens (D123): CREATE_TOKENS on each
owner principal, a USER resource. confluent-kafka's admin client has no USER resource, so these
ACLs are set with kafka-python's, as the admin, beside operate/kafka_acl.py's: every owner's made,
and any other USER-resource right the minter holds taken away."""

from __future__ import annotations

from typing import Any

from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

from wakeful.core import kafka_auth
from wakeful.core.kafka_rights import ADMIN, principal
from wakeful.core.settings import Settings
from wakeful.producers import kafka_tokens  # noqa: F401  # its quiet SCRAM login

MINTER = "minter"


def wanted(owners: list[str]) -> list[Any]:
    """The minter may create tokens for each owner, and do nothing else as them."""
    return [
        ACL(
            principal(MINTER),
            "*",
            ACLOperation.CREATE_TOKENS,
            ACLPermissionType.ALLOW,
            # a USER resource is named by the whole principal, as the broker checks it
            ResourcePattern(ResourceType.USER, f"User:{owner}", ACLResourcePatternType.LITERAL),
        )
        for owner in owners
    ]


def apply(settings: Settings, owners: list[str]) -> int:
    """Set the minter's CREATE_TOKENS rights to exactly `owners`; how many it holds."""
    admin = KafkaAdminClient(**kafka_auth.kafka_python_config(settings, ADMIN), request_timeout_ms=30_000)
    try:
        rules = wanted(owners)
        result = admin.create_acls(rules) if rules else {}
        if failed := result.get("failed"):
            raise RuntimeError(f"Kafka refused the minter's token rights: {failed}")
        every_user = ResourcePatternFilter(ResourceType.USER, None, ACLResourcePatternType.ANY)
        held, _ = admin.describe_acls(
            ACLFilter(principal(MINTER), None, ACLOperation.ANY, ACLPermissionType.ANY, every_user)
        )
        keep = {(r.resource_pattern.resource_name, r.operation) for r in rules}
        stale = [a for a in held if (a.resource_pattern.resource_name, a.operation) not in keep]
        if stale:
            admin.delete_acls(
                [
                    ACLFilter(
                        a.principal,
                        a.host,
                        a.operation,
                        a.permission_type,
                        ResourcePatternFilter(
                            ResourceType.USER,
                            a.resource_pattern.resource_name,
                            ACLResourcePatternType.LITERAL,
                        ),
                    )
                    for a in stale
                ]
            )
        return len(rules)
    finally:
        admin.close()
