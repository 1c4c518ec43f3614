"""docs/tracing.md held to the code: its commands parse, the spans it lists are the ones the roles
open, and every attribute it names is one some role stamps."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_run import page_commands, parsed

from wakeful.consumers.kafka.supervisor import ROLES
from wakeful.core import tracing

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs/tracing.md"
CODE = "\n".join(
    p.read_text() for folder in ("consumers", "core", "state") for p in (ROOT / folder).rglob("*.py")
)


def commands() -> list[list[str]]:
    return page_commands(PAGE.read_text())


@pytest.mark.parametrize("argv", commands(), ids=" ".join)
def test_every_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None


def test_the_page_shows_the_bench_with_tracing() -> None:
    assert ["bench", "--tasks", "2000", "--tracing"] in commands()


def test_every_span_on_the_page_is_one_a_role_opens() -> None:
    listed = re.findall(r"^\| `(wakeful\.[a-z]+ [a-z<>]+)` \|", PAGE.read_text(), re.MULTILINE)
    assert len(listed) == 7
    for name in listed:
        role, what = name.removeprefix("wakeful.").split(" ")
        if what == "handle":
            assert role in ROLES
        elif what == "<name>":
            assert 'f"wakeful.tool {' in CODE
        else:
            assert f'"{name}"' in CODE, name


def test_every_attribute_on_the_page_is_stamped_somewhere() -> None:
    table = PAGE.read_text().split("## Attributes", 1)[1].split("A handler stamps", 1)[0]
    named = set(re.findall(r"`wakeful\.([a-z_.]+)`", table))
    assert {"task_id", "task_version", "policy_version", "tool_catalog_version", "app", "workflow"} <= named
    for name in named - {"role"}:
        assert f"{name}=" in CODE or f'"wakeful.{name}"' in CODE, name


def test_the_page_names_the_settings_the_code_reads() -> None:
    text = PAGE.read_text()
    for env in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):
        assert env in text and env in CODE
    assert f"field `{tracing.OUTBOX_FIELD}`" in text
