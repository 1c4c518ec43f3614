"""docs/audit.md held to the code: every command its bash blocks show is one the CLI parses, and the
checks, headers and file names it states are the code's."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import page_commands, parsed

from wakeful.core import log_signing
from wakeful.schemas.custody import CHECKS

DOC = Path(__file__).resolve().parents[2] / "docs/audit.md"
pytestmark = pytest.mark.timeout(30)


def commands() -> list[list[str]]:
    return page_commands(DOC.read_text())


@pytest.mark.parametrize("argv", commands(), ids=" ".join)
def test_every_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None


def test_the_page_shows_audit_log_export_and_keys_export() -> None:
    shown = {tuple(argv[:2]) for argv in commands()}
    assert {("log", "export"), ("keys", "export")} <= shown and any(a[0] == "audit" for a in commands())


def test_the_page_names_the_code_s_checks_headers_and_files() -> None:
    text = DOC.read_text()
    assert f"checks passed: {', '.join(CHECKS)}" in text
    for header in (log_signing.KID_HEADER, log_signing.INDEX_HEADER, log_signing.SIG_HEADER):
        assert f"`{header}`" in text
    assert "relay/log-signing.json" in text and "admin/log-verifying.json" in text
