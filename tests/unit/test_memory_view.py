"""`wakeful memory`'s pure parts (cli/memory/view.py): a quarantine names a writer or a time window,
never both and never neither; a window is [since, until) in UTC whatever offset it was written
with; only active records are caught; `list` filters exactly and prints newest first, a long value
cut."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.cli.memory.view import VALUE_SHOWN, caught, chosen, line, moment, picked, principal
from wakeful.schemas.memory import MemoryRecord, Status

AT = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
SINCE, UNTIL = "2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z"


def record(n: int = 0, *, status: Status = Status.ACTIVE, at: datetime = AT, **fields: str) -> MemoryRecord:
    base: dict[str, object] = {
        "id": f"m-{n:024x}",
        "tenant": "default",
        "subject": "supplier:acme",
        "fact": "remittance_account",
        "value": "DE89370400440532013000",
        "writer": "principal:verifier",
        "provenance": "deadline",
        "task_id": "t-1",
    }
    times = {"status": status, "created_at": at, "expires_at": at + timedelta(days=1)}
    return MemoryRecord.model_validate(base | times | fields)


def test_a_time_is_read_as_iso_8601_and_kept_in_utc() -> None:
    assert moment("2026-03-02T09:00:00Z", "--since") == datetime(2026, 3, 2, 9, tzinfo=UTC)
    assert moment("2026-03-02T11:00:00+02:00", "--since") == datetime(2026, 3, 2, 9, tzinfo=UTC)
    assert moment("2026-03-02T09:00", "--since") == datetime(2026, 3, 2, 9, tzinfo=UTC)  # no offset: UTC
    with pytest.raises(click.BadParameter, match="ISO 8601"):
        moment("yesterday", "--since")


@pytest.mark.parametrize(
    ("writer", "since", "until"),
    [(None, None, None), ("principal:mallory", SINCE, UNTIL), ("principal:mallory", SINCE, None)],
    ids=["neither", "both", "writer and half a window"],
)
def test_a_quarantine_names_a_writer_or_a_window_never_both_never_neither(
    writer: str | None, since: str | None, until: str | None
) -> None:
    with pytest.raises(click.UsageError, match="exactly one"):
        chosen(writer, since, until)


def test_a_window_needs_both_ends_in_order() -> None:
    with pytest.raises(click.UsageError, match="both --since and --until"):
        chosen(None, SINCE, None)
    with pytest.raises(click.BadParameter, match="not before"):
        chosen(None, UNTIL, SINCE)
    with pytest.raises(click.BadParameter, match="not before"):
        chosen(None, SINCE, SINCE)
    assert chosen(None, SINCE, UNTIL) == (None, (moment(SINCE, ""), moment(UNTIL, "")))


def test_a_writer_is_named_as_records_name_it() -> None:
    assert chosen("principal:mallory", None, None) == ("principal:mallory", None)
    assert chosen("role:gate", None, None) == ("role:gate", None)
    with pytest.raises(click.BadParameter, match="principal:<name> or role:<role>"):
        chosen("mallory", None, None)


def test_only_active_records_are_caught() -> None:
    for status in (Status.QUARANTINED, Status.REVOKED):
        assert not caught(record(status=status), "principal:verifier", None)
    assert caught(record(), "principal:verifier", None)
    assert not caught(record(), "principal:mallory", None)


@given(st.integers(min_value=-7200, max_value=7200))
def test_a_window_catches_exactly_the_records_written_from_since_until_until(offset_s: int) -> None:
    window = chosen(None, SINCE, UNTIL)[1]
    at = moment(SINCE, "") + timedelta(seconds=offset_s)
    assert caught(record(at=at), None, window) == (0 <= offset_s < 3600)


def test_a_verifier_is_named_with_or_without_its_prefix() -> None:
    assert principal("verifier") == principal("principal:verifier") == "principal:verifier"


def test_list_keeps_exactly_what_each_option_names_newest_first() -> None:
    old = record(1, at=AT - timedelta(hours=1))
    new = record(2, status=Status.QUARANTINED, writer="principal:svc-refunds")
    other = record(
        3,
        at=AT - timedelta(minutes=1),
        tenant="acme",
        subject="customer:c-1",
        fact="preferred_language",
        value="de",
    )
    everything = [old, other, new]
    assert picked(everything) == [new, other, old]
    assert picked(everything, status="quarantined") == [new]
    assert picked(everything, tenant="acme", fact="preferred_language") == [other]
    assert picked(everything, writer="principal:verifier", subject="supplier:acme") == [old]
    assert picked(everything, status="revoked") == []


def test_a_line_cuts_a_long_value_and_says_expired() -> None:
    long = record(value="x" * 500)
    shown = line(long, now=AT)
    assert "x" * VALUE_SHOWN in shown and "x" * (VALUE_SHOWN + 1) not in shown and "440 more" in shown
    assert "(expired)" not in shown and "(expired)" in line(long, now=AT + timedelta(days=2))
    for field in (long.id, "active", "default", "supplier:acme", "remittance_account", "principal:verifier"):
        assert field in shown
