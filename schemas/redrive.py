"""What wakeful.log says about how far back `wakeful recover` must re-drive the role topics (D87).

- `MessageSource`, on each change a role's handler made (OutboxRecord.source, schema 4): the topic
  and partition of the message it applied, its offset, and the run loop's floor for that partition
  when the handler took it (core/sources.py): every message below the floor was handled before.
- `LogWatermark`, a record of its own that the relay publishes, signed as every log message is
  (D72): every change made in Redis before any record below `covers` (per log partition, the end
  offset) was appended is on the log. state/redrive.py folds both into each partition's start.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from pydantic import Field

from wakeful.schemas.base import Record

# Tells a watermark apart from the other records of a log message (schemas/logs.py).
WATERMARK_FIELD = "watermark_at"


class MessageSource(Record):
    """Where a change's input was read, and the run loop's floor for its partition then."""

    KIND: ClassVar[str] = "message_source"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = Field(default=1, exclude=True)

    topic: str
    partition: int
    offset: int
    floor: int


class LogWatermark(Record):
    """The relay's word that the log holds every change made before it had appended the records
    below `covers` (log partition -> the offset after its last such record): at its sweep it found
    no outbox entry older than those appends still unpublished (consumers/relay/watermark.py)."""

    KIND: ClassVar[str] = "log_watermark"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    # Dedupe key, never change: "watermark:<relay>:<watermark_at in ms>".
    record_id: str
    relay: str  # the relay process that saw it (host and pid): two relays' watermarks are distinct
    watermark_at: datetime  # Redis's time when the relay took the covered offsets
    covers: tuple[tuple[int, int], ...]  # (log partition, end offset), by partition
