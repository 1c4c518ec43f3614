"""A bounded rollout (D122): a new workflow version goes to some tenants, or a share of new tasks,
first; promoted, it goes to more or to all; rolled back, new tasks start on the version before.

The app ships both versions: the new one current, the one before kept (`App.retired`). An
operator's rollout record (`wakeful release rollout`, kept in the authority store per app and
workflow) says who gets the new one. It decides two things, both pure, here:

- `chosen`: the version a new task starts on. The new one for a tenant the rollout names, or for
  a task whose id falls in its share (a stable hash of the id, so a retried create lands the same);
  the one before for every other task; the one before for all once it is rolled back.
- `target`: the version gate 4 moves a sleeping task toward at its next step. The new one for a
  tenant the rollout names (by the new version's declared migration, else the task stays pinned on
  its own), the one before for every other tenant. A task on the new version whose target is the
  one before (a rollback, or a share's task) runs its own version, kept: gate 4 never moves a task
  back, it pins it.

A record for another version than the app's current is an old deploy's: it is ignored, and every
task is on the current version, as without one. A record that does not read as one holds the new
version back, as a rollback would (`read`): damage never widens a rollout.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import orjson

from wakeful.sdk.app import App

ROLLING, ROLLED_BACK = "rolling", "rolled_back"


@dataclass(frozen=True)
class Rollout:
    version: int  # the new version
    stable: int  # the version before, which every other task starts on
    tenants: tuple[str, ...] = ()
    share: float = 0.0  # of new tasks, by a hash of their ids: 0 to 1
    state: str = ROLLING
    by: str = ""
    at: str = ""
    reason: str = ""
    history: tuple[str, ...] = field(default=())  # "<at> <action> by <by>: <what>", oldest first

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    def said(self) -> str:
        if self.state == ROLLED_BACK:
            return f"v{self.version} rolled back: new tasks start on v{self.stable}"
        who = [f"tenants {', '.join(self.tenants)}"] if self.tenants else []
        who += [f"{self.share:.0%} of new tasks"] if self.share else []
        return f"v{self.version} for {' and '.join(who) or 'nobody yet'}; v{self.stable} for the rest"


def of(app: App, workflow: str, current: int, stored: Mapping[str, bytes]) -> Rollout | None:
    """The rollout of `app`'s `workflow`, whose current version is `current`, among the records
    `stored` (a Snapshot's `rollouts`); None, and nothing computed, when there is none."""
    if workflow not in stored:
        return None
    kept = tuple(v for name, v in app.kept_versions() if name == workflow)
    return read(stored[workflow], current, kept)


def read(raw: bytes | str | None, current: int, kept: tuple[int, ...]) -> Rollout | None:
    """The rollout of a workflow whose current version is `current` and which keeps the versions
    `kept`, from its stored record (None: none is stored). A record that does not read as one is a
    rollback to the newest kept version before `current`, if there is one."""
    if raw is None:
        return None
    found = decode(raw)
    if found is not None:
        return found
    before = max((v for v in kept if v < current), default=None)
    return None if before is None else Rollout(current, before, state=ROLLED_BACK, reason="unreadable record")


def decode(raw: bytes | str) -> Rollout | None:
    """A stored record, or None for one that does not read as a record."""
    try:
        doc = orjson.loads(raw)
        return Rollout(
            version=int(doc["version"]),
            stable=int(doc["stable"]),
            tenants=tuple(str(t) for t in doc.get("tenants", ())),
            share=min(max(float(doc.get("share", 0.0)), 0.0), 1.0),
            state=ROLLED_BACK if doc.get("state") != ROLLING else ROLLING,
            by=str(doc.get("by", "")),
            at=str(doc.get("at", "")),
            reason=str(doc.get("reason", "")),
            history=tuple(str(h) for h in doc.get("history", ())),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


def share_of(task_id: str) -> float:
    """Where a task id falls in [0, 1): the same for the same id, on every process."""
    return int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big") / 2**64


def chosen(rollout: Rollout | None, current: int, tenant: str, task_id: str) -> int:
    """The version a new task of `tenant` starts on, `current` being the app's."""
    if rollout is None or rollout.version != current:
        return current
    if rollout.state == ROLLING and (tenant in rollout.tenants or share_of(task_id) < rollout.share):
        return rollout.version
    return rollout.stable


def target(rollout: Rollout | None, current: int, tenant: str) -> int:
    """The version gate 4 moves a sleeping task of `tenant` toward."""
    if rollout is None or rollout.version != current:
        return current
    if rollout.state == ROLLING and tenant in rollout.tenants:
        return rollout.version
    return rollout.stable
