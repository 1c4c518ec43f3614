"""The consuming side of a role: the settings of the group consumer its run loop reads with.

Which group protocol it speaks (classic or KIP-848, docs/decisions.md D41) and, in a classic
group, how its membership survives a restart; offsets that the run loop stores by hand, never
ahead of the work they cover; and how often an idle consumer asks the broker again.
"""

from __future__ import annotations

from typing import Any

from wakeful.core import kafka_auth
from wakeful.core.log import librdkafka_consumer_config
from wakeful.core.settings import Settings

CLASSIC_SESSION_S = 30  # a classic group's member session (below)


def consumer_config(settings: Settings, role: str, group: str) -> dict[str, Any]:
    """A group consumer logged in as `role`'s principal, which may join only its own group(s), in
    the group protocol WAKEFUL_KAFKA_GROUP_PROTOCOL names (docs/decisions.md D41)."""
    return (
        _membership(settings, group)
        | librdkafka_consumer_config()
        | kafka_auth.client_config(settings, role)
        | {
            "group.id": group,
            # Names the role in kafka.log records and in the broker's client lists.
            "client.id": group,
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,
            "auto.commit.interval.ms": 200,
            "auto.offset.reset": "earliest",
            # The broker answers a fetch as soon as one byte is there (fetch.min.bytes), so this
            # bounds only how often an idle consumer asks again: at 5 ms six idle roles kept a
            # quarter of a core busy in the broker; at 100 ms wake-to-effect is no slower (D39).
            "fetch.wait.max.ms": 100,
            "fetch.min.bytes": 1,
        }
    )


def _membership(settings: Settings, group: str) -> dict[str, Any]:
    if settings.kafka_group_protocol == "consumer":
        # KIP-848: the broker assigns, and owns the session and heartbeat timing (its
        # group.consumer.* settings); librdkafka refuses the classic knobs below. No static
        # identity: a restart that reuses a SIGKILLed member's group.instance.id is fenced as
        # fatal until the dead one's session expires, where a new member joins at once.
        return {"group.protocol": "consumer"}
    static = {}
    if settings.instance_id:
        # Static membership: a restarted process with the same identity takes its partitions back
        # at once instead of waiting out the dead member's session.
        static = {"group.instance.id": f"{settings.instance_id}-{group}"}
    return static | {
        "partition.assignment.strategy": "cooperative-sticky",
        # Longer than a broker restart: a session that times out while the coordinator is away
        # makes librdkafka rejoin, and its next offset commit is then fenced as fatal.
        "session.timeout.ms": CLASSIC_SESSION_S * 1000,
        "heartbeat.interval.ms": 1_000,
    }
