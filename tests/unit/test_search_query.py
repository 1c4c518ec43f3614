"""A search as asked (schemas/search.py, D107): what the read door's parameters mean, which
summaries a query keeps, and the cursor's form. Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.schemas.search import Position, Query, from_params, to_params

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]
T0 = datetime(2030, 1, 1, tzinfo=UTC)
SUMMARY: dict[str, Any] = {
    "task_id": "inv-7",
    "workflow": "refund",
    "stage": "ready",
    "updated_at": "2030-01-01T00:10:00+00:00",
    "attributes": {"currency": "EUR", "region": "north"},
}


@pytest.mark.parametrize(
    ("query", "kept"),
    [
        (Query(), True),
        (Query(workflow="refund"), True),
        (Query(workflow="onboard"), False),
        (Query(stage="ready"), True),
        (Query(stage="closed"), False),
        (Query(attributes={"currency": "EUR"}), True),
        (Query(attributes={"currency": "EUR", "region": "south"}), False),
        (Query(attributes={"missing": "x"}), False),
        (Query(updated_after=T0 + timedelta(minutes=10)), True),  # from then on: the same moment counts
        (Query(updated_before=T0 + timedelta(minutes=10)), False),  # before: it does not
        (Query(updated_after=T0, updated_before=T0 + timedelta(hours=1)), True),
    ],
)
def test_a_query_keeps_a_summary_only_when_every_filter_given_holds(query: Query, kept: bool) -> None:
    assert query.matches(SUMMARY) is kept


def test_a_summary_without_a_readable_change_time_is_not_kept_by_a_time_filter() -> None:
    assert not Query(updated_after=T0).matches({**SUMMARY, "updated_at": "yesterday"})
    assert not Query(updated_after=T0).matches({k: v for k, v in SUMMARY.items() if k != "updated_at"})


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"colour": "red"}, "unknown search parameter 'colour'"),
        ({"stage": "Ready"}, "stage"),
        ({"attr.Bad-Name": "x"}, "attribute name"),
        ({"created_after": "2030-01-01T00:00:00"}, "with its zone"),
        ({"created_after": "soon"}, "not a time"),
        (
            {"created_after": "2030-01-02T00:00:00+00:00", "created_before": "2030-01-01T00:00:00+00:00"},
            "nothing is",
        ),
    ],
)
def test_parameters_a_search_cannot_mean_are_refused_saying_which(params: dict[str, str], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        from_params(params)


names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
times = st.none() | st.datetimes(min_value=datetime(2000, 1, 1), timezones=st.just(UTC))


@given(
    workflow=st.none() | st.text(min_size=1, max_size=20),
    stage=st.none() | names,
    attributes=st.dictionaries(names, st.text(max_size=30), max_size=3),
    created=times,
    updated=times,
)
def test_a_query_sent_as_parameters_is_the_query_the_door_reads(
    workflow: str | None,
    stage: str | None,
    attributes: dict[str, str],
    created: datetime | None,
    updated: datetime | None,
) -> None:
    query = Query(workflow, stage, attributes, created_after=created, updated_before=updated)
    assert from_params(to_params(query)) == query


@pytest.mark.parametrize("text", ["", "12", "x:inv-7", "12:", "12:has space", "-5:inv-7", "12:a}b"])
def test_a_cursor_that_no_page_gave_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a search cursor"):
        Position.parse(text)


def test_a_pages_cursor_names_the_last_entry_it_read() -> None:
    at = Position(1_893_456_000_000, "acme.inv-7")
    assert Position.parse(at.text()) == at
