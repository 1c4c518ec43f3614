"""How every command prints: progress to stderr, results to stdout (as JSON with --json)."""

from __future__ import annotations

from typing import Any

import click
import orjson


def say(text: str) -> None:
    click.echo(text, err=True)


def emit(data: Any, as_json: bool, human: str) -> None:
    if as_json:
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(human)


def outcome_line(receipt: dict[str, Any]) -> str:
    """'accepted: task is ready' / 'rejected: not an authorised approver'."""
    return f"{receipt['status']}: {receipt['reason']}"
