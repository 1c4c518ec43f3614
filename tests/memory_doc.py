"""The commands docs/memory.md shows, read from the page itself: the unit tier checks that the CLI
parses each one and that the page's numbers are the code's (tests/unit/test_memory_doc.py), and
tests/test_memory_cli.py runs every `wakeful memory` command on the real stack as written, on the
records the page's walk-through names."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs/memory.md"
# The walk-through's records (docs/memory.md names them; the test writes them).
PLANTED = "m-9a3e2f1b7c4d6e8f0a1b2c3d"
SUBJECT = "supplier:acme-tools-gmbh"
WINDOW = ("2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z")


def page() -> str:
    return DOC.read_text()


def commands() -> list[list[str]]:
    """Every `wakeful ...` line of the page's bash blocks, in page order, as argv (without `wakeful`
    and without a trailing `# comment`)."""
    blocks = re.findall(r"```bash\n(.*?)```", page(), re.DOTALL)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("wakeful ")]


def memory_commands() -> list[list[str]]:
    return [argv for argv in commands() if argv[:1] == ["memory"]]


def shown(*starts: str) -> list[list[str]]:
    """The page's `wakeful memory` commands that begin `starts`, in page order."""
    return [argv for argv in memory_commands() if argv[1 : 1 + len(starts)] == list(starts)]
