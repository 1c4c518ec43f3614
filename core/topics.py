"""The Kafka topics wakeful uses (created by operate/topics.py, `wakeful admin topics`).

Every topic is keyed by task id (wakeful.events by correlation id or task id), so one task's
messages stay ordered on one partition. wakeful.log's messages carry many tasks' records each, sent
to the partition consumers/kafka_client.partition_of() names for those tasks (D47).
"""

from __future__ import annotations

EVENTS = "wakeful.events"
WAKE = "wakeful.wake"
PROPOSALS_REQUEST = "wakeful.proposals.request"
PROPOSALS = "wakeful.proposals"
LOG = "wakeful.log"
DLQ = "wakeful.dlq"
# The admin's sealed copy of the authority keyspace, keyed "authority": the newest is what a lost
# Redis gets back (authority/backup.py, D70). Only the admin (a super user) writes or reads it.
AUTHORITY = "wakeful.authority"

ALL = (EVENTS, WAKE, PROPOSALS_REQUEST, PROPOSALS, LOG, DLQ, AUTHORITY)

# The audit/recovery log and the dead letters are evidence: keep them until an operator trims them.
_KEEP_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
TOPIC_CONFIG: dict[str, dict[str, str]] = {
    LOG: _KEEP_FOREVER,
    DLQ: _KEEP_FOREVER,
    AUTHORITY: {"cleanup.policy": "compact", "retention.ms": "-1", "min.compaction.lag.ms": "3600000"},
}


# Upstream events and the wakes the door sends are judged by when the broker appended them, never
# by when a role got round to reading them (D84): on these the broker sets each message's timestamp,
# whatever its producer said. A topic made before keeps CreateTime until `wakeful admin topics` (or
# `dev up`) sets this on it; until then the roles judge by their own clock, as they did.
APPEND_TIMED = frozenset({EVENTS, WAKE})
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
# Kafka's default segment.ms: a message may outlive its topic's retention.ms by up to one segment,
# because the broker deletes whole segments.
SEGMENT_S = 7 * 24 * 3600


def config(name: str, log_retention_days: int = 0, events_retention_hours: int = 0) -> dict[str, str]:
    """The configuration topic `name` is created with: wakeful.log keeps its records
    `log_retention_days` (WAKEFUL_LOG_RETENTION_DAYS), or forever at 0; wakeful.events and
    wakeful.wake keep theirs `events_retention_hours` (WAKEFUL_EVENTS_RETENTION_HOURS, the broker's
    own at 0), stamped with the broker's append time. A topic that exists keeps its retention: an
    operator changes it with kafka-configs.sh (docs/retention.md)."""
    if name == LOG and log_retention_days > 0:
        return {**_KEEP_FOREVER, "retention.ms": str(log_retention_days * 24 * 3600 * 1000)}
    if name in APPEND_TIMED:
        kept = (
            {"retention.ms": str(events_retention_hours * 3600 * 1000)} if events_retention_hours > 0 else {}
        )
        return {**APPEND_TIME, **kept}
    return dict(TOPIC_CONFIG.get(name, {}))


def event_keep_s(events_retention_hours: int) -> int:
    """How long after an event reached wakeful.events the door may still read it: the topic's
    retention and one segment. A verdict older than that, as a wake's broker time tells, is none the
    door can have given (D84)."""
    return events_retention_hours * 3600 + SEGMENT_S


# Topics one partition serves: their order matters more than their rate.
SINGLE_PARTITION = frozenset({AUTHORITY})
