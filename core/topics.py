"""The Kafka topics wakeful uses (created by devstack/topic_admin.py, `wakeful dev topics`).

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


def config(name: str, log_retention_days: int = 0) -> dict[str, str]:
    """The configuration topic `name` is created with: wakeful.log keeps its records
    `log_retention_days` (WAKEFUL_LOG_RETENTION_DAYS), or forever at 0. A topic that exists keeps
    its own: an operator changes it with kafka-configs.sh (docs/retention.md)."""
    if name == LOG and log_retention_days > 0:
        return {**_KEEP_FOREVER, "retention.ms": str(log_retention_days * 24 * 3600 * 1000)}
    return dict(TOPIC_CONFIG.get(name, {}))


# Topics one partition serves: their order matters more than their rate.
SINGLE_PARTITION = frozenset({AUTHORITY})
