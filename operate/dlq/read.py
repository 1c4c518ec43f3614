"""Reading wakeful.dlq as the admin (`wakeful dlq list | show`): every letter from the earliest
offset to the end as of the start of the read, or one letter by its id (`<partition>:<offset>`).

A letter that does not decode is still a letter: it comes back with why, never as a crash.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from wakeful.core import kafka_auth, topics
from wakeful.core.errors import DecodeError, WakefulError
from wakeful.core.log import librdkafka_config
from wakeful.core.settings import Settings
from wakeful.operate import reach
from wakeful.schemas.logs import DeadLetter
from wakeful.workflow import replays

TIMEOUT_S = 10.0  # for the broker's metadata and for one fetch that must return what the marks promise
PROGRESS_EVERY = 1000  # letters between two progress lines


@dataclass(frozen=True)
class Letter:
    """One message of wakeful.dlq: its id, when the topic took it, and the letter or why not."""

    partition: int
    offset: int
    written: datetime | None  # the message's timestamp on the topic
    letter: DeadLetter | None
    problem: str = ""  # why it does not decode, when letter is None
    size: int = 0

    @property
    def id(self) -> str:
        return replays.letter_id(self.partition, self.offset)


class LetterNotFound(WakefulError):
    """No letter has this id; the message says which ids there are."""


def letter_of(msg: Message) -> Letter:
    value = msg.value() or b""
    kind, stamp = msg.timestamp()
    written = datetime.fromtimestamp(stamp / 1000, UTC) if kind and stamp > 0 else None
    partition, offset = msg.partition() or 0, msg.offset() or 0
    try:
        return Letter(partition, offset, written, DeadLetter.decode(value), size=len(value))
    except DecodeError as exc:
        return Letter(partition, offset, written, None, f"not a dead letter: {exc.reason}", len(value))


class DlqReader:
    def __init__(self, settings: Settings) -> None:
        reach.require_kafka(settings)
        config = kafka_auth.client_config(settings, kafka_auth.ADMIN) | librdkafka_config()
        # A group of its own that commits nothing: reading the letters moves no one's offsets.
        self.consumer = Consumer(
            config | {"group.id": f"wakeful-dlq-read-{uuid.uuid4().hex[:12]}", "enable.auto.commit": False}
        )

    def close(self) -> None:
        self.consumer.close()

    def marks(self) -> dict[int, tuple[int, int]]:
        """Each partition's (earliest, end) offsets now."""
        try:
            found = self.consumer.list_topics(topics.DLQ, timeout=TIMEOUT_S).topics.get(topics.DLQ)
            if found is None or found.error is not None:
                raise WakefulError(f"topic {topics.DLQ} is not there: `wakeful dev up` creates it")
            return {
                p: self.consumer.get_watermark_offsets(TopicPartition(topics.DLQ, p), timeout=TIMEOUT_S)
                for p in sorted(found.partitions)
            }
        except KafkaException as exc:
            raise WakefulError(f"cannot read {topics.DLQ}'s offsets: {exc.args[0]}") from exc

    def every(self, progress: Callable[[int, int], None] | None = None) -> Iterator[Letter]:
        """Every letter from the earliest offsets to the end as of now, partition by partition.
        `progress(read, total)` is called every PROGRESS_EVERY letters."""
        marks = {p: (low, high) for p, (low, high) in self.marks().items() if high > low}
        total, read = sum(high - low for low, high in marks.values()), 0
        for partition, (low, high) in marks.items():
            for msg in self._range(partition, low, high):
                read += 1
                if progress is not None and read % PROGRESS_EVERY == 0:
                    progress(read, total)
                yield letter_of(msg)

    def ends(self) -> dict[int, int]:
        """Each partition's end offset now: where the letters written from now on begin."""
        return {p: high for p, (_, high) in self.marks().items()}

    def since(self, ends: dict[int, int]) -> Iterator[Letter]:
        """Every letter written since `ends` (from ends()), to the end as of now; a partition that
        stops answering raises rather than leave the rest unread."""
        for partition, (_, high) in self.marks().items():
            start = ends.get(partition, 0)
            if high > start:
                yield from (letter_of(msg) for msg in self._range(partition, start, high))

    def one(self, letter: str) -> Letter:
        """The letter with id `letter`; LetterNotFound that says which ids there are."""
        try:
            partition, offset = replays.parse_letter_id(letter)
        except ValueError as exc:
            raise LetterNotFound(str(exc)) from exc
        marks = self.marks()
        if partition not in marks:
            raise LetterNotFound(
                f"{topics.DLQ} has no partition {partition}: its partitions are 0 to {len(marks) - 1}"
            )
        low, high = marks[partition]
        if not low <= offset < high:
            held = f"offsets {low} to {high - 1}" if high > low else "no letters"
            raise LetterNotFound(f"no letter {letter}: partition {partition} holds {held}")
        for msg in self._range(partition, offset, offset + 1):
            return letter_of(msg)
        raise LetterNotFound(f"no letter {letter}")  # _range raises first; kept for the type checker

    def _range(self, partition: int, start: int, end: int) -> Iterator[Message]:
        """The messages of [start, end) of one partition (end no further than the end mark)."""
        self.consumer.assign([TopicPartition(topics.DLQ, partition, start)])
        deadline, at = time.monotonic() + TIMEOUT_S, start
        while at < end:
            if time.monotonic() > deadline:
                raise WakefulError(
                    f"{topics.DLQ} partition {partition} stopped answering at offset {at} (it ends at {end})"
                )
            for msg in self.consumer.consume(500, 0.5):
                if msg.error() is not None:
                    continue  # the end of the partition, or a broker hiccup: the deadline bounds it
                if msg.partition() != partition or (msg.offset() or 0) < at:
                    continue
                deadline, at = time.monotonic() + TIMEOUT_S, (msg.offset() or 0) + 1
                if (msg.offset() or 0) < end:
                    yield msg
                if at >= end:
                    break
        self.consumer.unassign()
