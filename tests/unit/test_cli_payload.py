"""A payload from the command line is what the operator typed, or a usage error before anything is
signed: `--field` values are JSON when they parse, `--payload` is a JSON object, fields win."""

from __future__ import annotations

import io
from typing import Any

import click
import pytest

from wakeful.cli.payload import build_payload, field_value, parse_field, parse_fields, read_payload


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2500", 2500),
        ("-3", -3),
        ("2.5", 2.5),
        ("true", True),
        ("false", False),
        ("null", None),
        ('"2500"', "2500"),
        ("[1, 2]", [1, 2]),
        ('{"a": 1}', {"a": 1}),
        ("123456789012345678901234567890", 123456789012345678901234567890),  # past 64 bits, exact
        ("hello", "hello"),
        ("", ""),
        ("2500 EUR", "2500 EUR"),
        ("NaN", "NaN"),  # not JSON: kept as the text it is, never a float nan
        ("Infinity", "Infinity"),
        ("{broken", "{broken"),
    ],
)
def test_field_value_is_json_when_it_parses_else_the_text_as_typed(text: str, value: Any) -> None:
    assert field_value(text) == value and type(field_value(text)) is type(value)


@pytest.mark.parametrize(
    ("item", "pair"),
    [
        ("amount=2500", ("amount", 2500)),
        ("note=a=b", ("note", "a=b")),  # only the first = splits
        ("ok=true", ("ok", True)),
        ("empty=", ("empty", "")),
        ("customer.id=c-1", ("customer.id", "c-1")),
    ],
)
def test_a_field_splits_at_its_first_equals_sign(item: str, pair: tuple[str, Any]) -> None:
    assert parse_field(item) == pair


@pytest.mark.parametrize(
    ("items", "problem"),
    [
        (["amount"], "is not key=value"),
        (["=5"], "is not a field name"),
        ([" amount=5"], "is not a field name"),
        (["a/b=1"], "is not a field name"),
        (["k" * 65 + "=1"], "is not a field name"),
        (["amount=1", "amount=2"], "'amount' is given twice"),
    ],
)
def test_a_bad_field_is_a_usage_error_naming_the_option(items: list[str], problem: str) -> None:
    with pytest.raises(click.BadParameter, match=problem) as caught:
        parse_fields(items)
    assert caught.value.param_hint == "'--field'"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"[1, 2]", "a payload is a JSON object, not an array"),
        (b'"amount"', "not a string"),
        (b"2500", "not a number"),
        (b"null", "not null"),
        (b"{amount: 1}", "not JSON"),
        (b"", "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        (b'{"a": NaN}', "not JSON"),
    ],
)
def test_a_payload_that_is_not_a_json_object_is_refused(text: bytes, problem: str) -> None:
    with pytest.raises(click.BadParameter, match=problem):
        read_payload(io.BytesIO(text))


@pytest.mark.parametrize(
    ("file", "fields", "shortcuts", "payload"),
    [
        (None, [], {}, {}),
        (b'{"amount": 100, "currency": "EUR"}', [], {}, {"amount": 100, "currency": "EUR"}),
        (b'{"amount": 100, "currency": "EUR"}', ["amount=2500"], {}, {"amount": 2500, "currency": "EUR"}),
        (b'{"amount": 100}', [], {"amount": 300, "note": None}, {"amount": 300}),  # unset: nothing
        (None, ["amount=2500"], {"workflow": "refund"}, {"workflow": "refund", "amount": 2500}),
        (b'{"workflow": "a"}', [], {"workflow": "b"}, {"workflow": "b"}),
    ],
)
def test_fields_and_shortcuts_override_the_payload_file(
    file: bytes | None, fields: list[str], shortcuts: dict[str, Any], payload: dict[str, Any]
) -> None:
    source = io.BytesIO(file) if file is not None else None
    assert build_payload(source, fields, shortcuts) == payload


def test_a_shortcut_and_a_field_setting_the_same_key_is_refused_not_resolved_silently() -> None:
    with pytest.raises(click.BadParameter, match="amount also set by its own option"):
        build_payload(None, ["amount=5"], {"amount": 7})
