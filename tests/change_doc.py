"""The commands docs/change.md's kill path shows, read from the page itself: the unit tier checks
that the CLI parses each one (tests/unit/test_change_doc.py), and tests/test_tool_switches.py runs
them on the real stack as written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs/change.md"
SECTION = re.compile(r"^## \d+\. The kill path: disable a tool$", re.MULTILINE)
REVOKE = re.compile(r"^## \d+\. The kill path: revoke a signer$", re.MULTILINE)
FREEZE = re.compile(r"^## \d+\. The kill path: freeze a task, a tenant, an app or the fleet$", re.MULTILINE)
TASK = "t-..."  # the page's placeholder for the parked task's id


def kill_path_commands(section: re.Pattern[str] = SECTION) -> list[list[str]]:
    """Every `wakeful ...` line of the section's bash blocks, as argv (without `wakeful`)."""
    text = DOC.read_text()
    heading = section.search(text)
    assert heading is not None, f"docs/change.md has no section {section.pattern!r}"
    body = text[heading.end() :].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", body, re.DOTALL)
    lines = [line.split(" #")[0].strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("wakeful ")]


def kill_path_command(*starts: str, task_id: str = TASK, section: re.Pattern[str] = SECTION) -> list[str]:
    """The page's one command that begins `starts`, with the parked task's id put in."""
    found = [argv for argv in kill_path_commands(section) if argv[: len(starts)] == list(starts)]
    assert len(found) == 1, f"docs/change.md shows {len(found)} `wakeful {' '.join(starts)}` commands"
    return [task_id if arg == TASK else arg for arg in found[0]]
