"""`wakeful memory`'s pure parts: options to values, records to lines (no server touched).

The commands are in cli/memory/commands.py; tests/test_memory_cli.py checks them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

import click

from wakeful.schemas.base import cut
from wakeful.schemas.memory import WRITER, MemoryRecord, Status

VALUE_SHOWN = 60  # characters of a value `list` prints
TIME_HELP = "ISO 8601, e.g. 2026-03-02T09:00:00Z; a time without an offset is UTC"
PRINCIPAL = "principal:"


def moment(text: str, option: str) -> datetime:
    """An ISO 8601 time given on the command line, as an aware UTC datetime."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a time: {TIME_HELP}", param_hint=option) from None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def chosen(
    writer: str | None, since: str | None, until: str | None
) -> tuple[str | None, tuple[datetime, datetime] | None]:
    """What `quarantine` acts on: a writer, or a [since, until) window of created_at; never both."""
    window = since is not None or until is not None
    if (writer is None) == (not window):
        raise click.UsageError("name either --writer W, or --since T and --until T: exactly one of them")
    if writer is not None:
        if not re.fullmatch(WRITER, writer):
            raise click.BadParameter(
                f"{writer!r} is no writer: principal:<name> or role:<role>, as `wakeful memory list` shows",
                param_hint="--writer",
            )
        return writer, None
    if since is None or until is None:
        raise click.UsageError("a window needs both --since and --until")
    start, end = moment(since, "--since"), moment(until, "--until")
    if start >= end:
        raise click.BadParameter(f"--since {since} is not before --until {until}", param_hint="--until")
    return None, (start, end)


def caught(record: MemoryRecord, writer: str | None, window: tuple[datetime, datetime] | None) -> bool:
    """True if `quarantine` moves `record`: active, and of the writer or written in the window."""
    if record.status is not Status.ACTIVE:
        return False
    if writer is not None:
        return record.writer == writer
    assert window is not None
    return window[0] <= record.created_at < window[1]


def principal(name: str) -> str:
    """A principal as facts name their verifiers: `verifier` and `principal:verifier` alike."""
    return name if name.startswith(PRINCIPAL) else PRINCIPAL + name


def picked(records: Iterable[MemoryRecord], **wanted: str | None) -> list[MemoryRecord]:
    """The records whose fields equal every option given (None: any), newest first."""
    given = {field: value for field, value in wanted.items() if value is not None}
    kept = [r for r in records if all(str(getattr(r, f)) == v for f, v in given.items())]
    return sorted(kept, key=lambda r: (r.created_at, r.id), reverse=True)


def line(record: MemoryRecord, now: datetime) -> str:
    expires = stamp(record.expires_at) + (" (expired)" if record.expires_at <= now else "")
    return (
        f"{record.id}  {record.status.value:11} {record.tenant}  {record.subject}  {record.fact}="
        f"{cut(record.value, VALUE_SHOWN)!r}  by {record.writer}  from {record.provenance}  expires {expires}"
    )


def shown(record: MemoryRecord) -> str:
    doc = record.model_dump(mode="json", exclude={"history", "schema_version"})
    lines = [f"{field:12} {value}" for field, value in doc.items() if value not in (None, [], ())]
    lines.append("history:")
    lines += [f"  {stamp(c.at)}  {c.status.value:11} by {c.by}: {c.reason}" for c in record.history]
    return "\n".join(lines)


def stamp(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
