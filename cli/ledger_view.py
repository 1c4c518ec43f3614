"""`wakeful ledger`'s two forms of what the downstreams booked (state/downstreams.py `entries`).

Each downstream lists its own entries in its own shape (the bank's bookings, the shop's remedies
and notices, the register's registrations, payments and removals), so neither form assumes one:
JSON is every entry as its downstream gave it, with the downstream's name added; the human form is a
heading per downstream and a line of `key=value` per entry. Pure: the command reads, this formats.
"""

from __future__ import annotations

import json
import re
from typing import Any

Booked = list[tuple[str, list[dict[str, Any]]]]  # (downstream user, its entries in its own order)
_PLAIN = re.compile(r"[!#-<>-~]+")  # printable ASCII but space, quote and '=': shown as is; else JSON
_HIDDEN = ("schema_version",)  # every stored record has one; an operator reading entries does not need it


def as_json(booked: Booked) -> list[dict[str, Any]]:
    """Every entry, each with `downstream` (first, and the runtime's: it wins over an entry's own)."""
    return [
        {"downstream": user} | entry | {"downstream": user} for user, entries in booked for entry in entries
    ]


def human(booked: Booked) -> str:
    """A heading per downstream (`shop: 2 entries`), then each entry on a line of `key=value`."""
    if not booked:
        return "no entries"
    lines = []
    for user, entries in booked:
        count = len(entries)
        lines.append(f"{user}: {count or 'no'} entr{'y' if count == 1 else 'ies'}")
        lines += [
            "  " + " ".join(f"{k}={_value(v)}" for k, v in e.items() if k not in _HIDDEN) for e in entries
        ]
    return "\n".join(lines)


def _value(value: Any) -> str:
    if isinstance(value, str) and _PLAIN.fullmatch(value):
        return value
    # ASCII-escaped JSON: a value a model's proposal may have put there writes no control or
    # direction character to the operator's terminal
    return json.dumps(value, sort_keys=True, ensure_ascii=True, default=str)
