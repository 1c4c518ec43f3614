"""Which dead letters a bulk replay takes (`wakeful dlq replay --code C --since T`), as pure code.

A letter keeps its refusal as text (`DeadLetter.reason`), not as a code, so its code is read from
that text, one way for every letter ever written:
- a letter of the door (source `inbound`) whose reason is one the door writes has the door's
  code (door.CODES): its reasons are fixed templates, and tests/unit/test_letter_codes.py holds
  each template to the code the door gives it; an operator's replay the door refused has the
  code of the event's own refusal;
- any other letter (another role's, or the door's runner giving up on a message) has the class
  its reason gets in the `wakeful_dead_lettered_total` metric (core/metrics_pure.py REASONS).
`wakeful dlq list` shows each letter's code, so what `--code` takes is what the list says.
A letter is in a window [since, until) by when wakeful.dlq took it (the time `list` shows).
"""

from __future__ import annotations

import re
from datetime import datetime

from wakeful.core.metrics_pure import REASONS, reason_class
from wakeful.workflow.door import CODES
from wakeful.workflow.replays import DOOR

KNOWN = tuple(dict.fromkeys((*CODES, *REASONS)))  # every code a letter can have
# The door's reasons (workflow/door.py, consumers/inbound/main.py), the first match wins.
DOOR_REASONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("too_large", re.compile(r"malformed event: [0-9]+ bytes is over the [0-9]+-byte limit")),
    ("malformed", re.compile(r"malformed (event|replay): ")),
    ("unknown_key", re.compile(r"unknown key id ")),
    ("bad_signature", re.compile(r"bad signature for key id ")),
    ("stale", re.compile(r"event is (too old|from the future): ")),
    ("unknown_kind", re.compile(r"unknown event kind ")),
    ("not_allowed", re.compile(r"key .* may not send ")),
    ("unaddressed", re.compile(r".* must name its task_id$|an approval must carry the correlation id")),
    ("duplicate", re.compile(r"duplicate event ")),
    ("unknown_wait", re.compile(r"unknown correlation id ")),
)
REPLAY_OF = re.compile(r"replay of letter [0-9]+:[0-9]+ by [^:]*: ")  # then the event's own refusal
REPLAY_TENANT = re.compile(r"replay of letter [0-9]+:[0-9]+: .* may not replay an event of tenant ")


def code(source: str | None, reason: str) -> str:
    """The code of a letter written by `source` for `reason` (one of KNOWN)."""
    if source == DOOR:
        found = door_code(reason)
        if found is not None:
            return found
    return reason_class(reason)


def door_code(reason: str) -> str | None:
    """The door's code for one of its reasons; None for a reason the door does not write."""
    inner = REPLAY_OF.match(reason)
    if inner is not None:
        return door_code(reason[inner.end() :])
    if REPLAY_TENANT.match(reason):
        return "not_allowed"
    return next((name for name, pattern in DOOR_REASONS if pattern.match(reason)), None)


def known(wanted: str) -> str:
    """`wanted` if it is a code a letter can have; else ValueError that names them all."""
    if wanted not in KNOWN:
        raise ValueError(
            f"{wanted!r} is no letter code: use one of {', '.join(KNOWN)} "
            "(`wakeful dlq list` shows each letter's code)"
        )
    return wanted


def window(since: datetime, until: datetime | None, now: datetime) -> tuple[datetime, datetime]:
    """[since, until) with until defaulting to now; ValueError unless since is before until."""
    end = now if until is None else until
    if since >= end:
        said = "now" if until is None else end.isoformat()
        raise ValueError(
            f"--since {since.isoformat()} is not before --until {said}: give a --since before --until"
        )
    return since, end


def taken(wanted: str, span: tuple[datetime, datetime], written: datetime | None, letter_code: str) -> bool:
    """Whether a bulk replay takes a letter of code `letter_code` that wakeful.dlq took at `written`
    (None: the topic kept no time for it, so no window holds it)."""
    return letter_code == wanted and written is not None and span[0] <= written < span[1]
