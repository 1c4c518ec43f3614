"""`wakeful dlq replay --code C --since T [--until T]`: every letter of one code written in a
window, each replayed by the single replay's own path (operate/dlq/replay.py `Replayer.replay_letter`):
re-verified, claimed in the record, recorded, as one `wakeful dlq replay ID` would.

Which letters: operate/dlq/codes.py. A letter replayed before is skipped (the record's claim
refuses it, as it refuses a second single replay), and so is one whose event its task applied
already; both count as done. Anything else that cannot be replayed is skipped with why, and a
replay that fails is recorded as failed; either makes the run end non-zero.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from wakeful.operate.dlq import codes as letter_codes
from wakeful.operate.dlq.read import Letter
from wakeful.operate.dlq.replay import AppliedAlready, NotReplayable, Replayer
from wakeful.state.replays import ReplayedAlready

PROGRESS_S = 1.0  # seconds between two progress lines
FAILURES_IN_A_ROW = 3  # after this many failed sends in a row, the rest is not tried


def code_of(letter: Letter) -> str:
    """The letter's code, as `wakeful dlq list` shows it and `--code` selects it."""
    found = letter.letter
    return letter_codes.code(found.source if found else None, found.reason if found else letter.problem)


def select(letters: Iterable[Letter], wanted: str, span: tuple[datetime, datetime]) -> list[Letter]:
    return [x for x in letters if letter_codes.taken(wanted, span, x.written, code_of(x))]


@dataclass
class Summary:
    """What a bulk replay did (or, dry, would do) to each letter it selected."""

    code: str
    since: datetime
    until: datetime
    dry_run: bool
    selected: int = 0
    replayed: list[dict[str, Any]] = field(default_factory=list)  # each replay's record
    skipped: list[dict[str, str]] = field(default_factory=list)  # letter, why, done (yes/no)
    failed: list[dict[str, str]] = field(default_factory=list)  # letter, why

    @property
    def all_done(self) -> bool:
        """Every letter is replayed now, or was before (replayed, or its event applied already)."""
        return not self.failed and all(s["done"] == "yes" for s in self.skipped)

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "dry_run": self.dry_run,
            "selected": self.selected,
            "replayed": self.replayed,
            "skipped": self.skipped,
            "failed": self.failed,
            "all_done": self.all_done,
        }

    def counts(self, *, selected: bool = True) -> str:
        verb = "would replay" if self.dry_run else "replayed"
        done = f"{verb} {len(self.replayed)}, skipped {len(self.skipped)}, failed {len(self.failed)}"
        return f"selected {self.selected}, {done}" if selected else done

    def said(self) -> str:
        """The lines a person reads: each letter replayed, each skipped or failed with why, the counts."""
        verb = "would replay" if self.dry_run else "replayed"
        rows = [
            f"{r['letter']:<10}  {verb}: {r['action']} {r['event'] or 'task ' + r['task']}"
            for r in self.replayed
        ]
        rows += [f"{s['letter']:<10}  skipped: {s['why']}" for s in self.skipped]
        rows += [f"{f['letter']:<10}  failed: {f['why']}" for f in self.failed]
        window = f"code {self.code} written in [{self.since.isoformat()}, {self.until.isoformat()})"
        return "\n".join([*rows, f"{window}: {self.counts()}"])


def replay_all(
    replayer: Replayer,
    letters: list[Letter],
    summary: Summary,
    by: str,
    reason: str,
    *,
    again: bool,
    progress: Callable[[str], None],
) -> Summary:
    """Replay each of `letters` in turn as `by`, into `summary`; progress every PROGRESS_S."""
    signer = replayer.operator(by)  # once: a --by that may not replay stops the run before any letter
    summary.selected = len(letters)
    shown, in_a_row = time.monotonic(), 0
    for n, letter in enumerate(letters, 1):
        if in_a_row >= FAILURES_IN_A_ROW:
            why = f"not tried: the {FAILURES_IN_A_ROW} replays before it failed; fix the cause and run again"
            summary.failed.append({"letter": letter.id, "why": why})
            continue
        try:
            done = replayer.replay_letter(letter, signer, by, reason, dry_run=summary.dry_run, again=again)
        except ReplayedAlready as exc:
            why = f"replayed already: {exc.last.said()}"
            summary.skipped.append({"letter": letter.id, "why": why, "done": "yes"})
        except AppliedAlready as exc:
            summary.skipped.append({"letter": letter.id, "why": str(exc), "done": "yes"})
        except NotReplayable as exc:
            summary.skipped.append({"letter": letter.id, "why": str(exc), "done": "no"})
        except Exception as exc:  # any cause; one claimed is recorded as failed
            in_a_row += 1
            summary.failed.append({"letter": letter.id, "why": str(exc)})
        else:
            in_a_row = 0
            summary.replayed.append(done.as_dict())
        if time.monotonic() - shown >= PROGRESS_S:
            shown = time.monotonic()
            progress(f"{n} of {len(letters)} letters: {summary.counts(selected=False)} ...")
    return summary
