"""An idle role reads the switch counter every tick but writes its acknowledgement only when the
counter moved, or often enough to read as live (consumers/kafka/switch_acks.py)."""

from __future__ import annotations

import pytest

from wakeful.consumers.kafka.switch_acks import LIVE_S, REFRESH_S, TICK_S, acker, due


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        ((10.0, 10.0 - TICK_S / 2, None, 3, 9.9), "wait"),  # read a moment ago
        ((10.0, 10.0 - 2 * TICK_S, None, 3, 9.9), "read"),
        ((10.0, 0.0, 3, 3, 9.9), "skip"),  # unchanged and stamped recently
        ((10.0, 0.0, 4, 3, 9.9), "write"),  # a switch was thrown: acknowledged at once
        ((10.0, 0.0, 3, None, 9.9), "write"),  # never written yet
        ((10.0, 0.0, 3, 3, 10.0 - 2 * REFRESH_S), "write"),  # restamped so the record stays live
    ],
)
def test_a_role_acknowledges_a_moved_counter_at_once_and_restamps_an_unchanged_one(
    at: tuple[float, float, int | None, int | None, float], expected: str
) -> None:
    """at: now, last read, the counter as read (None: not yet), the one last written, last write."""
    assert due(*at) == expected


def test_a_restamped_record_never_ages_past_live() -> None:
    assert REFRESH_S + TICK_S < LIVE_S


class _Planted:
    """Redis as a role reads it, with a switch counter that is no number."""

    def __init__(self) -> None:
        self.written: list[str] = []

    def get(self, _key: str) -> bytes:
        return b"not-a-number"

    def time(self) -> tuple[int, int]:
        return 1, 0

    def hset(self, _key: str, _field: str, value: str) -> None:
        self.written.append(value)


def test_a_switch_counter_that_is_no_number_is_logged_and_never_stops_the_role_or_is_acknowledged() -> None:
    client, said = _Planted(), list[tuple[str, dict[str, str]]]()
    ack = acker(client, "gate", lambda event, **fields: said.append((event, fields)))  # type: ignore[arg-type]
    ack()
    assert client.written == [] and [event for event, _ in said] == ["role.ack_failed"]
