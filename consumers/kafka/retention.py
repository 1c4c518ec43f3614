"""Whether the role topics keep their messages long enough for `wakeful recover` to re-drive what
the log does not yet reflect (D87): the relay's lag, and the time to notice a lost Redis and run
recover. Read by the relay at start-up and at each sweep, and by `wakeful recover --check`.

`problems()` is pure; `kept()` reads the topics' settings as the caller's principal (the relay may
DescribeConfigs on them, core/kafka_rights.py).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AdminClient,
    ConfigResource,
)

from wakeful.core import kafka_auth, topics
from wakeful.core.log import librdkafka_config
from wakeful.core.settings import Settings

# The topics a recover re-drives, and the group that reads each (state/redrive.py).
REDRIVEN = {topics.WAKE: "wakeful-gate", topics.PROPOSALS: "wakeful-executor"}
# The least a re-driven topic must keep: a relay stalled over a night, noticed, and Redis recovered.
MIN_KEEP_S = 24 * 3600


@dataclass(frozen=True)
class Kept:
    retention_ms: int  # -1: forever
    cleanup: str  # cleanup.policy: "delete", "compact" or both


def problems(kept: Mapping[str, Kept | None], lag_s: float = 0.0) -> list[str]:
    """What is wrong with how long the re-driven topics keep their messages, each naming the topic,
    what it keeps and what to set; `lag_s` is how far the relay is behind (its oldest change not
    yet on the log)."""
    found: list[str] = []
    for topic, k in sorted(kept.items()):
        if k is None:
            found.append(f"{topic}: its retention could not be read (is the broker up, the topic made?)")
            continue
        if "compact" in k.cleanup and "delete" not in k.cleanup:
            found.append(
                f"{topic} is compacted (cleanup.policy={k.cleanup}): a re-drive needs every message; "
                f"set cleanup.policy=delete"
            )
            continue
        if k.retention_ms < 0:
            continue
        hours = k.retention_ms / 3_600_000
        if k.retention_ms < MIN_KEEP_S * 1000:
            found.append(
                f"{topic} keeps messages {hours:g} h (retention.ms={k.retention_ms}), under the "
                f"{MIN_KEEP_S // 3600} h a re-drive after a lost Redis must reach back: set "
                f"retention.ms={MIN_KEEP_S * 1000} or more"
            )
        if lag_s * 1000 > k.retention_ms / 2:
            found.append(
                f"the relay is {lag_s / 3600:.1f} h behind and {topic} keeps messages {hours:g} h "
                f"(retention.ms={k.retention_ms}): a Redis lost now could not be given back what the "
                f"log lacks once they are deleted; raise retention.ms or let the relay catch up"
            )
    return found


def kept(settings: Settings, role: str, timeout: float = 10.0) -> dict[str, Kept | None]:
    """Each re-driven topic's retention, read as `role`; None for one that could not be read."""
    admin = AdminClient(kafka_auth.client_config(settings, role) | librdkafka_config())
    found: dict[str, Kept | None] = dict.fromkeys(REDRIVEN)
    try:
        futures = admin.describe_configs(
            [ConfigResource("topic", t) for t in REDRIVEN], request_timeout=timeout
        )
        for resource, future in futures.items():
            try:
                entries = future.result(timeout)
                found[resource.name] = Kept(
                    int(entries["retention.ms"].value), str(entries["cleanup.policy"].value)
                )
            except (KafkaException, KeyError, ValueError, TypeError, concurrent.futures.TimeoutError):
                continue
    except KafkaException:
        pass
    finally:
        admin.poll(0)
    return found
