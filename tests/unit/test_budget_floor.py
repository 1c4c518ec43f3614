"""A tenant's day counter floor (state/budget.Account.floor), read from its yyyymmdd day by hand."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.state.budget import DAY_SPAN, Account

EPOCH = date(1970, 1, 1)


@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 30)))
def test_a_days_floor_is_its_days_since_the_epoch_times_the_span_as_strptime_reads_it(when: datetime) -> None:
    account = Account.at("t-1", "acme", when.replace(tzinfo=UTC))
    assert account.floor == (when.date() - EPOCH).days * DAY_SPAN
    assert account.floor == (datetime.strptime(account.day, "%Y%m%d").date() - EPOCH).days * DAY_SPAN


def test_the_next_day_starts_one_span_higher() -> None:
    today = datetime(2026, 12, 7, 23, 59, tzinfo=UTC)
    assert Account.at("t-1", "acme", today + timedelta(minutes=1)).floor == (
        Account.at("t-1", "acme", today).floor + DAY_SPAN
    )


@pytest.mark.parametrize(
    "day",
    ["2026127", "2026-12-7", "\uff12\uff10\uff12\uff16\uff11\uff12\uff10\uff17", "20261307", "2026120a", ""],
)
def test_a_day_that_is_not_yyyymmdd_is_refused(day: str) -> None:
    with pytest.raises(ValueError):
        _ = Account("t-1", "acme", day).floor
