"""The relay's watermark on wakeful.log: "every change made before these appends is on the log"
(D87). Pure but for the clock the caller reads: no Kafka, no Redis.

At each sweep the relay notes how far its own messages reached on each log partition (the offset
after the last one the broker acknowledged), then reads Redis's clock: a snapshot. Every record
below those offsets was appended before that moment, so it was made in Redis before it. The sweep
then scans every outbox (state/outbox.py). When the oldest entry still waiting there is younger
than a snapshot (its stream id, Redis's time when it was added, is past the snapshot's time plus
the skew allowed between Redis nodes' clocks), no change made before that snapshot is still
waiting: each is on the log, since an entry leaves its outbox only once the broker took it. The
relay then publishes the newest such snapshot as a watermark, when it covers more than the last.
A relay behind by hours still moves its watermark, by the older snapshots it keeps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from wakeful.schemas.redrive import LogWatermark

# Redis nodes (a cluster) each stamp their own outbox entries: a snapshot is trusted only once the
# oldest waiting entry is this much younger than it.
SKEW_MS = 1000
KEEP = 64  # snapshots kept while the outboxes hold older entries (one per sweep)


@dataclass(frozen=True)
class Snapshot:
    at_ms: int  # Redis's time, read after `covers`
    covers: tuple[tuple[int, int], ...]  # (log partition, offset after the relay's last append)


def choose(snapshots: Sequence[Snapshot], oldest_ms: int | None, skew_ms: int = SKEW_MS) -> Snapshot | None:
    """The newest snapshot older than every outbox entry still waiting (`oldest_ms`, None: none
    waits) by more than the skew, or None."""
    for snap in reversed(snapshots):
        if oldest_ms is None or oldest_ms > snap.at_ms + skew_ms:
            return snap
    return None


def advances(covers: Sequence[tuple[int, int]], published: Mapping[int, int]) -> bool:
    """Whether a watermark of `covers` says more than the ones already published."""
    return any(end > published.get(partition, 0) for partition, end in covers)


@dataclass
class Watermarks:
    relay: str  # this relay process, for the record id
    snapshots: list[Snapshot] = field(default_factory=list)
    published: dict[int, int] = field(default_factory=dict)

    def take(self, appended: Mapping[int, int], now_ms: int) -> None:
        """A snapshot: `appended` read before `now_ms` (Redis's clock)."""
        if appended:
            self.snapshots.append(Snapshot(now_ms, tuple(sorted(appended.items()))))
            del self.snapshots[:-KEEP]

    def due(self, oldest_ms: int | None) -> LogWatermark | None:
        """The watermark to publish after a sweep that found `oldest_ms`, or None."""
        chosen = choose(self.snapshots, oldest_ms)
        if chosen is None:
            return None
        self.snapshots = self.snapshots[self.snapshots.index(chosen) + 1 :]
        if not advances(chosen.covers, self.published):
            return None
        for partition, end in chosen.covers:
            self.published[partition] = max(end, self.published.get(partition, 0))
        return LogWatermark(
            record_id=f"watermark:{self.relay}:{chosen.at_ms}",
            relay=self.relay,
            watermark_at=datetime.fromtimestamp(chosen.at_ms / 1000, UTC),
            covers=chosen.covers,
        )
