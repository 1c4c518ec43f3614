"""An event's payload from the command line: `--payload FILE.json` (or `-`), then `--field k=v`.

Pure, and checked whole before anything is signed or sent: a payload that is not a JSON object, or a
field that is not `key=value`, is a usage error naming the option.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import IO, Any

import click

FIELD_KEY = r"[A-Za-z0-9_.-]{1,64}"
_FIELD_KEY = re.compile(FIELD_KEY)
_JSON_TYPE = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
_JSON_TYPE[type(None)] = "null"


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity: kept as the text they are


def field_value(text: str) -> Any:
    """`text` as JSON when it parses (2500 -> 2500, true -> True, "x" -> x), else the string itself."""
    try:
        return json.loads(text, parse_constant=_no_constants)
    except ValueError:
        return text


def parse_field(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    if not sep:
        raise click.BadParameter(f"{item[:60]!r} is not key=value", param_hint="'--field'")
    if not _FIELD_KEY.fullmatch(key):
        raise click.BadParameter(f"{key[:60]!r} is not a field name ({FIELD_KEY})", param_hint="'--field'")
    return key, field_value(raw)


def parse_fields(items: Iterable[str]) -> dict[str, Any]:
    """`--field` values as a dict; a key given twice is an error, never a silent last-one-wins."""
    fields: dict[str, Any] = {}
    for item in items:
        key, value = parse_field(item)
        if key in fields:
            raise click.BadParameter(f"{key!r} is given twice", param_hint="'--field'")
        fields[key] = value
    return fields


def read_payload(source: IO[bytes] | None) -> dict[str, Any]:
    """The JSON object in `source` (a file or stdin), {} when there is none."""
    if source is None:
        return {}
    name = getattr(source, "name", "-")
    hint = f"'--payload' ({name})" if name not in ("-", "<stdin>") else "'--payload' (stdin)"
    try:
        doc = json.loads(source.read(), parse_constant=_no_constants)
    except ValueError as exc:  # a UnicodeDecodeError too
        raise click.BadParameter(f"not JSON: {exc}", param_hint=hint) from exc
    if not isinstance(doc, dict):
        raise click.BadParameter(f"a payload is a JSON object, not {_JSON_TYPE[type(doc)]}", param_hint=hint)
    return doc


def build_payload(
    source: IO[bytes] | None, fields: Iterable[str], shortcuts: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The payload file's keys, overridden by the shortcut options that are set (e.g. --amount),
    overridden by `--field`s. A shortcut and a field that set the same key are an error."""
    given = parse_fields(fields)
    set_by_option = {k: v for k, v in (shortcuts or {}).items() if v is not None}
    both = sorted(set(set_by_option) & set(given))
    if both:
        raise click.BadParameter(
            f"{', '.join(both)} also set by its own option; give it once", param_hint="'--field'"
        )
    return {**read_payload(source), **set_by_option, **given}
