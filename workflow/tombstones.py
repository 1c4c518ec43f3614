"""Whether a tombstone on wakeful.log is one `wakeful task purge` could have made (D92). Pure.

A purge takes a task only when its app's retention lets it go (workflow/retention.py) and its every
record is on the log (state/purge.py checks the counter's version and the drained outbox). So
`wakeful recover` folds a tombstone only if the log, up to it, shows the same: the task's newest
change is the version the tombstone names, in the workflow, stage and tenant it names; that change
left it finished by its app's rules (`retention.verdict`, the purge's own decision, judged at the
tombstone's time with the purge's own retention and floor), waiting for nothing and with no
quarantine marker; and the tombstone is not dated after the recovery. Anything else is refused:
the task lives on, and the refusal is named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from wakeful.schemas.tombstone import PurgeRecord
from wakeful.sdk.app import App
from wakeful.state.rebuild_ends import Tip
from wakeful.workflow import retention

# A purge's clock may run ahead of the one recover runs on: a tombstone dated later than this
# after the recovery began is refused.
SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class PurgeRule:
    """The purge's rule, as `Ends.rule`: why a tombstone is refused, or None."""

    finished: Mapping[str, frozenset[str]]  # retention.finished_stages of the app
    keep: timedelta  # the app's retention of finished tasks, at least the door's replay window
    now: datetime

    def __call__(self, tomb: PurgeRecord, tip: Tip) -> str | None:
        change = tip.change
        if change is None:
            return (
                "the log holds no change of the task before it"
                " (a purge takes a task once it is all on the log)"
            )
        if change.version != tomb.state_version:
            return (
                f"it names version {tomb.state_version}, and the task's newest change on the log is "
                f"version {change.version} (a purge takes a task at the version its counter holds)"
            )
        said, logged = (tomb.workflow, tomb.stage), (change.workflow, change.stage)
        if said != logged or (change.tenant and change.tenant != tomb.tenant):
            return (
                f"it says {'/'.join(said)} of tenant {tomb.tenant!r}; "
                f"the task's last change says {'/'.join(logged)}"
            )
        if tomb.purged_at > self.now + SKEW:
            return f"it is dated {tomb.purged_at.isoformat()}, after this recovery"
        try:
            at = datetime.fromisoformat(change.at)
        except ValueError:
            return f"the task's last change has no readable time ({change.at[:40]!r})"
        seen = retention.Seen(
            tomb.task_id, change.workflow, change.stage, at, tip.marker is not None, change.waits
        )
        verdict = retention.verdict(seen, self.finished, tomb.purged_at, tomb.purged_at, self.keep)
        if verdict == "purge":
            return None
        return {
            "unknown_workflow": f"its workflow {change.workflow!r} is not one the app recover runs with runs",
            "not_finished": f"the task is open: its last change left it at {change.stage!r}, "
            f"not a finished stage of {change.workflow!r}",
            "waiting": f"the task waits for {change.waits} thing(s)",
            "quarantined": "the task holds a quarantine marker",
            "recent": f"the task's last change ({change.at}) is within the app's retention "
            f"({self.keep}) of the purge ({tomb.purged_at.isoformat()})",
        }[verdict]


def purge_rule(app: App, floor: timedelta, now: datetime) -> PurgeRule:
    """The rule `wakeful task purge` applies for `app`, with the door's replay window as its floor."""
    return PurgeRule(retention.finished_stages(app), max(app.retention.closed_tasks, floor), now)
