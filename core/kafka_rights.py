"""Who may read and write which Kafka topic: one principal per role, and the one table of its rights.

The local stack (`wakeful dev up`) and `wakeful admin kafka-acl` both build the broker's ACLs from
RIGHTS, so the two never drift. The table follows DESIGN.md section 2:

| principal        | reads                     | writes                                | groups            |
|------------------|---------------------------|---------------------------------------|-------------------|
| wakeful-upstream | -                         | wakeful.events                        | -                 |
| wakeful-ingress  | -                         | wakeful.events (what the HTTP door    | -                 |
|                  |                           | took: it re-signs nothing)            |                   |
| wakeful-inbound  | wakeful.events            | wakeful.wake, wakeful.dlq             | wakeful-inbound   |
| wakeful-timer    | -                         | wakeful.wake (deadline wakes)         | -                 |
| wakeful-gate     | wakeful.wake              | wakeful.proposals.request, .dlq       | wakeful-gate      |
| wakeful-proposer | wakeful.proposals.request | wakeful.proposals, wakeful.dlq        | wakeful-proposer  |
| wakeful-executor | wakeful.proposals         | wakeful.dlq                           | wakeful-executor  |
| wakeful-relay    | - (its input is Redis;    | wakeful.log, wakeful.dlq              | -                 |
|                  | .wake's, .proposals'      |                                       |                   |
|                  | config)                   |                                       |                   |
| wakeful-minter   | - (CREATE_TOKENS on each Kafka downstream's owner, `User:wakeful-dt-<name>`)  |
| wakeful-dt-<ds>  | -                         | the Kafka downstream's own topics     | -                 |
|                  | (no password: only the delegation tokens the minter makes log in as it)    |
| wakeful-admin    | super user: creates topics, SCRAM users and ACLs; reads the log and dlq    |

Roles that dead-letter through the runner also read the dlq's config (DescribeConfigs), so a
letter stays under the topic's max.message.bytes. Read implies Describe; Write implies Describe and,
since Kafka 3.0, the idempotent producer's IdempotentWrite: no role needs a cluster-wide right.
"""

from __future__ import annotations

from dataclasses import dataclass

from wakeful.core import kafka_auth, topics
from wakeful.core.kafka_auth import user_name

ADMIN = kafka_auth.ADMIN
UPSTREAM = "upstream"


@dataclass(frozen=True)
class Rights:
    """What one role's principal may do; anything not listed is denied."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    reads_config: tuple[str, ...] = ()  # topics whose max.message.bytes the role looks up


_LETTERS = (topics.DLQ,)

RIGHTS: dict[str, Rights] = {
    UPSTREAM: Rights(writes=(topics.EVENTS,)),
    "ingress": Rights(writes=(topics.EVENTS,)),
    "inbound": Rights(
        reads=(topics.EVENTS,),
        writes=(topics.WAKE, topics.DLQ),
        groups=("wakeful-inbound",),
        reads_config=_LETTERS,
    ),
    # A schedule's tick is a signed task.create, as an upstream system's (consumers/timer/schedules.py).
    "timer": Rights(writes=(topics.WAKE, topics.EVENTS)),
    "gate": Rights(
        reads=(topics.WAKE,),
        writes=(topics.PROPOSALS_REQUEST, topics.DLQ),
        groups=("wakeful-gate",),
        reads_config=_LETTERS,
    ),
    "proposer": Rights(
        reads=(topics.PROPOSALS_REQUEST,),
        writes=(topics.PROPOSALS, topics.DLQ),
        groups=("wakeful-proposer",),
        reads_config=_LETTERS,
    ),
    "executor": Rights(
        reads=(topics.PROPOSALS,),
        writes=(topics.DLQ,),
        groups=("wakeful-executor",),
        reads_config=_LETTERS,
    ),
    # It reads how long the re-driven topics keep their messages, against its own lag (D87).
    "relay": Rights(writes=(topics.LOG, topics.DLQ), reads_config=(topics.WAKE, topics.PROPOSALS)),
    # It creates the Kafka downstreams' delegation tokens (D123): CREATE_TOKENS on each owner, a
    # USER resource, which operate/kafka_acl.py sets from the downstreams, not from this table.
    "minter": Rights(),
    ADMIN: Rights(),  # a super user (super.users); it needs no ACL of its own
}
ROLES = tuple(RIGHTS)


def principal(role: str) -> str:
    return f"User:{user_name(role)}"


@dataclass(frozen=True, order=True)
class Acl:
    """One allow rule: `principal` may do `operation` on the literal resource `resource_type:name`."""

    principal: str
    resource_type: str  # "topic" or "group"
    name: str
    operation: str  # "read", "write" or "describe_configs"

    def __str__(self) -> str:
        return f"allow {self.principal} {self.operation.upper()} on {self.resource_type} {self.name}"


def acls(role: str) -> list[Acl]:
    """The allow rules for one role, from RIGHTS."""
    rights, who = RIGHTS[role], principal(role)
    rules = [Acl(who, "topic", t, "read") for t in rights.reads]
    rules += [Acl(who, "topic", t, "write") for t in rights.writes]
    rules += [Acl(who, "group", g, "read") for g in rights.groups]
    rules += [Acl(who, "topic", t, "describe_configs") for t in rights.reads_config]
    return rules


def all_acls() -> list[Acl]:
    return [rule for role in ROLES for rule in acls(role)]


def writers(topic: str) -> set[str]:
    """The roles that may write `topic` (the admin, a super user, aside)."""
    return {role for role, rights in RIGHTS.items() if topic in rights.writes}
