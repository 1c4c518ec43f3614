"""W3C trace context in Kafka and HTTP headers: read strictly, written in one shape; and what a
span reads of a message and of a checkpoint. Pure: no SDK (core/tracing.py uses it).

A message's trace context rides in its `traceparent` header (and `tracestate`, if any), as the W3C
Trace Context recommendation writes it over HTTP: `00-<32 hex trace id>-<16 hex parent id>-<2 hex
flags>`. Whatever else arrives there (raw bytes, a huge value, a wrong shape, an all-zero id, the
header given twice) is no context at all: the reader starts a new trace, and never fails on it.
No signature covers these headers (the role channel tag and the log signature cover topic, key and
value: core/provenance.py, core/log_signing.py), so adding or dropping them changes no verdict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
# A version-00 traceparent is 55 characters; a later version may append fields after a dash. Past
# this many bytes a value is not read at all.
TRACEPARENT_MAX = 256
TRACESTATE_MAX = 512  # W3C: 32 members of at most 256 characters; a carrier may cut it at 512
_SHAPE = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[ -~]*)?")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
# A tracestate list member, as W3C Trace Context (and the OpenTelemetry API) define it: read here
# first, so that no hostile value reaches the API, which logs a warning for each one it refuses.
_MEMBER = re.compile(
    r"([a-z][_0-9a-z\-\*\/]{0,255}|[a-z0-9][_0-9a-z\-\*\/]{0,240}@[a-z][_0-9a-z\-\*\/]{0,13})"
    r"=([\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e])"
)
TRACESTATE_MEMBERS = 32


@dataclass(frozen=True)
class Parent:
    """A remote parent, as a traceparent header names it."""

    trace_id: int
    span_id: int
    flags: int
    tracestate: tuple[tuple[str, str], ...] = ()  # its members, in order

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)


def text(raw: object, limit: int) -> str | None:
    """A header value as ASCII text, or None if it is not short printable ASCII."""
    if isinstance(raw, bytes | bytearray):
        if len(raw) > limit:
            return None
        try:
            value = bytes(raw).decode("ascii")
        except UnicodeDecodeError:
            return None
    elif isinstance(raw, str):
        if len(raw) > limit or not raw.isascii():
            return None
        value = raw
    else:
        return None
    return value.strip(" \t")


def parse_traceparent(raw: object) -> Parent | None:
    """The parent a traceparent value names, or None for anything that is not one."""
    value = text(raw, TRACEPARENT_MAX)
    if value is None:
        return None
    found = _SHAPE.fullmatch(value)
    if found is None:
        return None
    version, trace_id, span_id, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None  # ff is never valid; version 00 has exactly four fields
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return Parent(int(trace_id, 16), int(span_id, 16), int(flags, 16))


def values(headers: object) -> dict[str, list[object]]:
    """The trace headers among `headers` (Kafka's list of (name, value) pairs, or a mapping such as
    HTTP headers), by lower-case name. Anything else, or a malformed pair, is skipped."""
    pairs: Iterable[Any]
    if isinstance(headers, Mapping):
        pairs = headers.items()
    elif isinstance(headers, list | tuple):
        pairs = headers
    else:
        return {}
    found: dict[str, list[object]] = {}
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2 or not isinstance(pair[0], str):
            continue
        name = pair[0].lower()
        if name in (TRACEPARENT, TRACESTATE):
            found.setdefault(name, []).append(pair[1])
    return found


def parent_of(headers: object) -> Parent | None:
    """The remote parent that `headers` name, or None: no traceparent, one that does not parse, or
    more than one (which to believe is unknowable, so neither is). A tracestate comes along only
    with a good traceparent, and only if it is one short ASCII value."""
    found = values(headers)
    parents = found.get(TRACEPARENT, [])
    if len(parents) != 1:
        return None
    parent = parse_traceparent(parents[0])
    if parent is None:
        return None
    states = found.get(TRACESTATE, [])
    state = text(states[0], TRACESTATE_MAX) if len(states) == 1 else None
    members = parse_tracestate(state) if state else None
    if members:
        parent = Parent(parent.trace_id, parent.span_id, parent.flags, members)
    return parent


def parse_tracestate(value: str) -> tuple[tuple[str, str], ...] | None:
    """A tracestate's members, or None if any is malformed, a key comes twice, or there are more
    than 32: the whole state is then dropped, as W3C says."""
    members: dict[str, str] = {}
    for raw in value.split(","):
        member = raw.strip(" \t")
        if not member:
            continue  # empty members are allowed
        found = _MEMBER.fullmatch(member)
        if found is None or found.group(1) in members:
            return None
        members[found.group(1)] = found.group(2)
    if len(members) > TRACESTATE_MEMBERS:
        return None
    return tuple(members.items())


def format_traceparent(trace_id: int, span_id: int, flags: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{flags & 0xFF:02x}"


def with_headers(headers: Any, added: list[tuple[str, bytes]]) -> Any:
    """`headers` (None, a list of pairs or a mapping) with `added` appended, in the same shape; the
    caller's own trace headers, if it set any, are kept and `added` is not."""
    if not added:
        return headers
    if headers is None:
        return added
    if isinstance(headers, Mapping):
        if any(str(name).lower() == TRACEPARENT for name in headers):
            return headers
        return {**headers, **dict(added)}
    pairs = list(headers)
    if any(isinstance(p, tuple) and str(p[0]).lower() == TRACEPARENT for p in pairs):
        return headers
    return pairs + added


class Consumed(Protocol):
    """What a span reads of a consumed Kafka message (confluent_kafka.Message)."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def headers(self) -> Any: ...


class _Business(Protocol):
    @property
    def workflow(self) -> str: ...
    @property
    def workflow_version(self) -> int: ...
    @property
    def version(self) -> int: ...


class _Versions(Protocol):
    @property
    def policy(self) -> str: ...
    @property
    def tool_catalog(self) -> str: ...
    @property
    def state_version(self) -> int: ...


class Task(Protocol):
    """What `stamp_task` reads of a checkpoint (schemas/checkpoint.Checkpoint)."""

    @property
    def task_id(self) -> str: ...
    @property
    def stage(self) -> str: ...
    @property
    def business(self) -> _Business: ...
    @property
    def versions(self) -> _Versions: ...
