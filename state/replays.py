"""The record of dead-letter replays (`wakeful dlq replay`, docs/decisions.md D71): one stream,
keys.DLQ_REPLAYS, that only the admin reaches.

A replay is claimed before it is done: one compare-and-swap reads the letter's replays and adds
this one, so two operators replaying one letter at once cannot both pass the "replayed already"
check. What the replay then did, or why it failed, is added after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import redis

from wakeful.core.errors import WakefulError
from wakeful.state import keys

CAS_RETRIES = keys.CAS_RETRIES
FAILED = "failed"  # the action of the record added when a claimed replay could not be done


@dataclass(frozen=True)
class Replay:
    """One replay of one letter: who, why, when, what it did (`action`), and what it sent."""

    letter: str
    by: str
    reason: str
    at: str
    action: str  # republished, wrapped, woke task; or "failed: <why>" after a claim whose act failed
    event: str = ""  # the replayed event's identity (ev:<key id>:<event id>), for an event
    task: str = ""  # the task woken, or the task the event names when it is known
    wrapper: str = ""  # the wrapper's event id, for an event replayed inside one

    def said(self) -> str:
        what = self.event or self.task
        return f"{self.action} {what} by {self.by} at {self.at}: {self.reason}"


class ReplayedAlready(WakefulError):
    """The letter was replayed before, and the operator did not say --again."""

    def __init__(self, message: str, last: Replay) -> None:
        super().__init__(message)
        self.last = last  # the replay that was done


class ReplayStore:
    """The record, read once and then only what was added since: a bulk replay checks each of its
    letters against what it holds, and its reads do not grow with the record's length per letter."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._known: dict[str, list[Replay]] = {}  # each letter's replays read so far, oldest first
        self._after = ""  # the id of the last entry read; "" before the first read

    def history(self) -> dict[str, list[Replay]]:
        """Every letter's replays, oldest first."""
        self._read(self.client)
        return {letter: list(found) for letter, found in self._known.items()}

    def of(self, letter: str) -> list[Replay]:
        self._read(self.client)
        return list(self._known.get(letter, []))

    def check(self, letter: str, *, again: bool) -> None:
        """ReplayedAlready unless `letter` was never replayed, or `again` (claim() checks it again)."""
        unclaimed(self.of(letter), again=again)

    def claim(self, replay: Replay, *, again: bool) -> None:
        """Add `replay` unless its letter was replayed before (ReplayedAlready), or `again`."""
        for _ in range(CAS_RETRIES):
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(keys.DLQ_REPLAYS)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
                    self._read(pipe)  # what was added since the last read, under the watch
                    unclaimed(self._known.get(replay.letter, []), again=again)
                    pipe.multi()
                    self._add(pipe, replay)
                    pipe.execute()
                    return
                except redis.WatchError:
                    continue
        raise WakefulError(f"letter {replay.letter}: other replays kept racing this one; try again")

    def add(self, replay: Replay) -> None:
        """Add a record without the check: what a claimed replay did in the end."""
        self._add(self.client, replay)

    @staticmethod
    def _add(client: redis.Redis | redis.client.Pipeline, replay: Replay) -> None:
        fields: Mapping[str | bytes, str] = dict(asdict(replay).items())
        client.xadd(keys.DLQ_REPLAYS, fields, maxlen=keys.DLQ_REPLAYS_KEPT, approximate=True)  # type: ignore[arg-type]

    def _read(self, client: redis.Redis | redis.client.Pipeline) -> None:
        """Add the entries after the last one read to what is known. An entry the stream trimmed
        since stays known: a replay that was done is still done."""
        start = f"({self._after}" if self._after else "-"
        entries: Any = client.xrange(keys.DLQ_REPLAYS, min=start)  # redis-py types the reply loosely
        for entry_id, fields in entries:
            replay = _replay(fields)
            self._known.setdefault(replay.letter, []).append(replay)
            self._after = entry_id.decode()


def unclaimed(before: list[Replay], *, again: bool) -> None:
    """ReplayedAlready when a letter whose records are `before` was replayed, unless `again`."""
    if before and _done(before[-1]) and not again:
        raise ReplayedAlready(
            f"letter {before[-1].letter} was replayed already ({before[-1].said()}): a replay's event is "
            "deduped, so a second one only helps after a failed first; say --again",
            before[-1],
        )


def _done(replay: Replay) -> bool:
    """Whether a letter whose last record is `replay` was replayed (not claimed, then failed)."""
    return not replay.action.startswith(FAILED)


def _replay(fields: Mapping[bytes, bytes]) -> Replay:
    doc = {k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()}
    return Replay(**{name: doc.get(name, "") for name in Replay.__dataclass_fields__})
