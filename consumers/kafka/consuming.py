"""The consuming side of a role: the settings of the group consumer its run loop reads with.

Which group protocol it speaks (classic or KIP-848, docs/decisions.md D41) and, in a classic
group, how its membership survives a restart; offsets that the run loop stores by hand, never
ahead of the work they cover; how often an idle consumer asks the broker again; and when a client
that lost its partitions and never got back into its group is replaced (Membership).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer

from wakeful.core import kafka_auth, metrics
from wakeful.core.log import librdkafka_consumer_config
from wakeful.core.settings import Settings

CLASSIC_SESSION_S = 30  # a classic group's member session (below)
COMMIT_INTERVAL_MS = 1000  # how often stored offsets are committed (D78)
FETCH_WAIT_MS = 2000  # the longest a fetch waits at the broker for a first byte (D39, D78, D80)


def consumer_config(settings: Settings, role: str, group: str) -> dict[str, Any]:
    """A group consumer logged in as `role`'s principal, which may join only its own group(s), in
    the group protocol WAKEFUL_KAFKA_GROUP_PROTOCOL names (docs/decisions.md D41)."""
    return (
        _membership(settings, group)
        | librdkafka_consumer_config()
        | kafka_auth.client_config(settings, role)
        | metrics.consumer_stats(role)
        | {
            "group.id": group,
            # Names the role in kafka.log records and in the broker's client lists.
            "client.id": group,
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,
            # Stored offsets go to the broker once a second (and at every rebalance and close): a
            # crash redoes at most that second's messages, which every role dedupes. At 200 ms a
            # trickle of tasks paid an OffsetCommit per group for every few messages (D78).
            "auto.commit.interval.ms": COMMIT_INTERVAL_MS,
            "auto.offset.reset": "earliest",
            # The broker answers a fetch as soon as one byte is there (fetch.min.bytes), so this
            # bounds only how often an idle consumer asks again: at 5 ms six idle roles kept a
            # quarter of a core busy in the broker; at 100 ms wake-to-effect was no slower (D39),
            # at 500 ms an idle fleet asks five times less often, no slower still (D78), and at
            # 2 s the idle broker spends a third less. What it costs: a partition a consumer gains
            # in a rebalance is in none of its fetches until the one waiting returns, so its first
            # message comes about 3 s after the hand-over (two waits at most), where it came
            # within 0.6 s (D80).
            "fetch.wait.max.ms": FETCH_WAIT_MS,
            "fetch.min.bytes": 1,
        }
    )


def group_consumer(settings: Settings, role: str, group: str) -> Callable[[], Consumer]:
    """Makes `role`'s group consumer: the runner's first client, and a fresh one in place of a
    client that lost its partitions and never got back into its group (Membership)."""
    config = consumer_config(settings, role, group)
    return lambda: Consumer(config)


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
        static = {"group.instance.id": static_id(settings.instance_id, group)}
    return static | {
        "partition.assignment.strategy": "cooperative-sticky",
        # Longer than a broker restart: a session that times out while the coordinator is away
        # makes librdkafka rejoin, and its next offset commit is then fenced as fatal.
        "session.timeout.ms": CLASSIC_SESSION_S * 1000,
        "heartbeat.interval.ms": 1_000,
    }


def static_id(instance_id: str, group: str) -> str:
    """The group.instance.id of a process with WAKEFUL_INSTANCE_ID `instance_id` in `group`."""
    return f"{instance_id}-{group}"


REJOIN_S = 2 * CLASSIC_SESSION_S  # lost partitions not back by then: the client is replaced (below)


class Membership:
    """Whether a consumer that lost its partitions got back into its group.

    librdkafka rejoins by itself once a session is lost, and in a healthy group it is assigned again
    within a session or so. But after a broker restart a static member has been seen to log the
    loss and never send JoinGroup again (confluentinc/librdkafka#3437): alive, polling, holding
    nothing, while its partitions wait for it. A member that lost its partitions and holds none
    `rejoin_s` later is replaced by a fresh client (Runner._rejoin). A member that merely holds
    nothing (more processes than partitions) lost nothing, so it is left alone.
    """

    def __init__(self, rejoin_s: float = REJOIN_S, started_at: float | None = None) -> None:
        self.rejoin_s = rejoin_s
        self.lost_at: float | None = None
        # A role started and not assigned yet (None once assigned, or once told why it waits).
        self.waiting_since = started_at
        self.tell_after_s = TELL_WAIT_S

    def lost(self, now: float) -> None:
        if self.lost_at is None:
            self.lost_at = now

    def assigned(self) -> None:
        self.lost_at = None
        self.waiting_since = None

    def waited(self, now: float) -> float | None:
        """How long a role that was never assigned has waited, once that is tell_after_s or more
        (then never again): a restarted role says why it reads nothing instead of sitting silent."""
        if self.waiting_since is None or now - self.waiting_since < self.tell_after_s:
            return None
        since, self.waiting_since = self.waiting_since, None
        return now - since

    def stuck(self, now: float, holds_any: Callable[[], bool]) -> bool:
        """True when the loss is older than rejoin_s and nothing was assigned since; holds_any is
        asked only then (it asks the client)."""
        if self.lost_at is None or now - self.lost_at < self.rejoin_s:
            return False
        if holds_any():
            self.lost_at = None
            return False
        return True


TELL_WAIT_S = 3.0  # a role's group assigns within a second or two when no one holds on to partitions


def why_waiting(role: str, topic: str, waited_s: float) -> str:
    """What a role that reads nothing yet tells its operator."""
    return (
        f"{role} holds no partition of {topic} {waited_s:.0f} s after it started: its group hands "
        f"them out at its next rebalance, which waits while a member that died without leaving (a "
        f"kill -9) keeps its session, up to {CLASSIC_SESSION_S} s; a role with more processes than "
        "partitions holds none, and `wakeful dev status` says whether the broker is up"
    )
