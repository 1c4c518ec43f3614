"""The pure parts of the metrics (core/metrics.py): a dead letter's reason as one of a few classes,
the port each supervised process serves its metrics on, and the consumer lag in librdkafka's
statistics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# A dead letter's reason is free text with ids in it; a label takes one of these classes. The first
# class one of whose phrases the reason holds (lower-cased) wins, so the specific come first: an
# event the inbound "could not take" is classed by the reason quoted after it.
REASON_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kafka_refused", ("kafka refused this message's output",)),
    ("poison", (" failed on this message: ",)),
    ("held", ("held wake",)),
    (
        "bad_signature",
        (
            "bad signature",
            "signature does not verify",
            "unsigned message",
            "more than one signature header",
            "signed for task",
        ),
    ),
    ("unknown_key", ("unknown key", "not a key of", "unknown signer")),
    (
        "not_allowed",
        (
            "may not",
            "no policy permits",
            "forbidden by policy",
            "carries no messages between roles",
            "not an approver",
            "not among the approvers",
            "revoked",
            # an app's policy in its own words (the refund app's "not an authorised approver")
            "authorised",
            "authorized",
        ),
    ),
    # "outside the backlog": the gate's word before D84, on letters kept since
    (
        "stale",
        ("too old", "from the future", "outside the backlog", "no verdict the door", "stale", "max age"),
    ),
    ("duplicate", ("duplicate",)),
    ("quarantined", ("quarantined",)),
    ("unknown_task", ("no task ", "not found", "unknown correlation id", "does not exist")),
    (
        "malformed",
        (
            "malformed",
            "wrong shape",
            "unreadable",
            "must name its task_id",
            "must carry",
            "unknown event kind",
            "bytes that are no message",
        ),
    ),
    ("replay", ("replay of letter",)),
    ("refused", ("refused",)),
)
REASONS = (*(name for name, _ in REASON_CLASSES), "other")
# Why a task was quarantined (Store.quarantine's reason): a failed integrity check
# (core/errors.py, IntegrityError's reason codes), versions gate 4 cannot carry forward, an outcome
# the executor could not record. Any other reason is counted as "other".
INTEGRITY_REASONS = ("integrity", "tampered", "misplaced", "rollback")
QUARANTINE_REASONS = (*INTEGRITY_REASONS, "schema", "incompatible", "outcome_not_recorded", "other")


def reason_class(reason: str) -> str:
    """The class of a dead letter's reason (REASONS): what a label may say of it."""
    said = reason.lower()
    for name, phrases in REASON_CLASSES:
        if any(p in said for p in phrases):
            return name
    return "other"


def quarantine_class(reason: str) -> str:
    """A quarantine's reason as a label may say it (QUARANTINE_REASONS)."""
    return reason if reason in QUARANTINE_REASONS else "other"


def ports(members: Sequence[str], base: int) -> dict[str, int]:
    """The metrics port of each supervised process: base, base+1, ... in the order given (roles in
    ROLES order, each role's replicas after its first). ValueError past the last port."""
    if base + len(members) - 1 > 65535:
        raise ValueError(f"{len(members)} processes from port {base} run past port 65535")
    return {member: base + i for i, member in enumerate(members)}


def lags(stats: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """(topic, partition) -> consumer lag from librdkafka's statistics JSON, for each partition
    this consumer fetches and whose lag it knows (librdkafka says -1 before it does)."""
    out: dict[tuple[str, str], int] = {}
    for topic, about in (stats.get("topics") or {}).items():
        for number, part in (about.get("partitions") or {}).items():
            lag = part.get("consumer_lag", -1)
            if number == "-1" or not isinstance(lag, int) or lag < 0:
                continue
            if part.get("fetch_state") in ("none", "stopped"):
                continue
            out[(str(topic), str(number))] = lag
    return out
