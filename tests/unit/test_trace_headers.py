"""The trace context in message headers: read strictly, anything else a new root, never an error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.core import trace_headers
from wakeful.core.trace_headers import Parent, format_traceparent, parent_of, parse_traceparent, with_headers

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
PARENT = Parent(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, 1)


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        (GOOD, PARENT),
        (GOOD.encode(), PARENT),
        (f" {GOOD}\t".encode(), PARENT),  # optional whitespace around a header value
        (GOOD[:-2] + "00", Parent(PARENT.trace_id, PARENT.span_id, 0)),
        ("01" + GOOD[2:] + "-more", Parent(PARENT.trace_id, PARENT.span_id, 1)),  # a later version
        (GOOD + "-more", None),  # version 00 has exactly four fields
        ("ff" + GOOD[2:], None),  # version ff is never valid
        (GOOD.upper(), None),  # lower-case hex only
        ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", None),  # all-zero trace id
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01", None),  # all-zero parent id
        (GOOD[:-1], None),
        (GOOD.replace("-", "_"), None),
        ("", None),
        (b"\xff\xfe" + GOOD.encode(), None),  # raw bytes
        ("00-" + "a" * 5000, None),  # huge
        (GOOD.encode() + b" " * 300, None),  # past the length read at all
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n", None),
        (None, None),
        (42, None),
        (["x"], None),
    ],
)
def test_only_a_well_formed_traceparent_names_a_parent(raw: Any, parsed: Parent | None) -> None:
    assert parse_traceparent(raw) == parsed


@pytest.mark.parametrize(
    ("headers", "parsed"),
    [
        ([("traceparent", GOOD.encode())], PARENT),
        ({"traceparent": GOOD}, PARENT),  # HTTP headers, as a mapping
        ({"Traceparent": GOOD}, PARENT),  # HTTP header names are case-insensitive
        ([("wakeful-kid", b"k"), ("traceparent", GOOD.encode()), ("wakeful-sig", b"s")], PARENT),
        ([("traceparent", GOOD.encode()), ("traceparent", GOOD.encode())], None),  # twice: neither
        ([("traceparent", b"garbage")], None),
        ([("traceparent", None)], None),
        ([], None),
        (None, None),
        (b"traceparent", None),
        ([("traceparent",)], None),  # a malformed pair is skipped
        ([(b"traceparent", GOOD.encode())], None),  # a name that is not text
        ("traceparent", None),
    ],
)
def test_a_message_names_its_parent_only_with_one_good_traceparent(
    headers: Any, parsed: Parent | None
) -> None:
    assert parent_of(headers) == parsed


def test_tracestate_rides_only_with_a_good_traceparent_and_only_if_short_ascii() -> None:
    state = b"vendor=abc,other=1"
    found = parent_of([("traceparent", GOOD.encode()), ("tracestate", state)])
    assert found is not None and found.tracestate == (("vendor", "abc"), ("other", "1"))
    assert parent_of([("traceparent", b"bad"), ("tracestate", state)]) is None
    huge = parent_of([("traceparent", GOOD.encode()), ("tracestate", b"a=" + b"b" * 600)])
    assert huge == PARENT  # the parent stands; the state is dropped
    raw = parent_of([("traceparent", GOOD.encode()), ("tracestate", b"\xff=1")])
    assert raw == PARENT


@given(st.binary(max_size=300))
def test_no_bytes_in_a_traceparent_header_raise(raw: bytes) -> None:
    found = parent_of([("traceparent", raw), ("tracestate", raw)])
    assert found is None or format_traceparent(found.trace_id, found.span_id, found.flags) in raw.decode()


def test_format_is_what_parse_reads() -> None:
    text = format_traceparent(PARENT.trace_id, PARENT.span_id, PARENT.flags)
    assert text == GOOD and parse_traceparent(text) == PARENT


def test_added_trace_headers_keep_the_callers_headers_and_shape() -> None:
    ours = [("traceparent", GOOD.encode())]
    signed = [("wakeful-kid", b"k"), ("wakeful-sig", b"s")]
    assert with_headers(None, ours) == ours
    assert with_headers(signed, ours) == [*signed, *ours]
    assert signed == [("wakeful-kid", b"k"), ("wakeful-sig", b"s")]  # the caller's list is not changed
    assert with_headers({"a": b"1"}, ours) == {"a": b"1", "traceparent": GOOD.encode()}
    assert with_headers(signed, []) is signed
    theirs = [("traceparent", b"00-theirs")]
    assert with_headers(theirs, ours) is theirs  # a caller's own context is kept
    assert with_headers({"Traceparent": "x"}, ours) == {"Traceparent": "x"}


def test_values_reads_trace_headers_only() -> None:
    assert trace_headers.values([("a", b"1"), ("tracestate", b"x=1")]) == {"tracestate": [b"x=1"]}


@pytest.mark.parametrize(
    ("value", "members"),
    [
        ("a=1", (("a", "1"),)),
        (" a=1 , ,t@sys=x y ", (("a", "1"), ("t@sys", "x y"))),
        ("A=1", None),  # keys are lower case
        ("a=1,a=2", None),  # a key twice
        ("a=", None),
        ("a=1=2", None),
        ("!!!", None),
        (",".join(f"k{i}=v" for i in range(33)), None),  # more than 32
        (",".join(f"k{i}=v" for i in range(32)), tuple((f"k{i}", "v") for i in range(32))),
    ],
)
def test_a_tracestate_is_kept_whole_or_not_at_all(
    value: str, members: tuple[tuple[str, str], ...] | None
) -> None:
    assert trace_headers.parse_tracestate(value) == members


def test_a_hostile_tracestate_is_dropped_without_a_word_from_the_api(
    caplog: pytest.LogCaptureFixture,
) -> None:
    found = parent_of([("traceparent", GOOD.encode()), ("tracestate", b"!!!,a=1")])
    assert found == PARENT and not caplog.records
