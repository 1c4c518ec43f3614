"""What a workflow shows of its tasks to the tenant's readers, without unsealing them (D107).

A workflow declares views (name -> a function returning a JSON object) and search attributes
(name -> a function returning a short text, a number or a boolean) of one task as a `Viewed`:

    views={"progress": lambda v: {"stage": v.stage, "amount": v.state.amount}},
    attributes={"currency": lambda v: v.state.currency},

The writer runs them on the new checkpoint at every change of the task and carries what they
return on wakeful.log, from which the relay keeps the task index (workflow/views.py has the rules).
Pure functions of what they are shown: no I/O, no clock. Whatever they return is readable by every
reader of the tenant and kept on the log for as long as it is: never a secret.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

S = TypeVar("S", bound=BaseModel)


@dataclass(frozen=True)
class Viewed(Generic[S]):
    """One task, as its views and attributes read it: its id as its tenant names it, its stage and
    task version, its state as the workflow's model, who asked for it, when it was created (None for
    a task older than checkpoints that say) and last changed, and the kinds of what it waits for."""

    task_id: str
    stage: str
    version: int
    state: S
    tenant: str
    requester: str
    created_at: datetime | None
    updated_at: datetime
    waits: tuple[str, ...]


View = Callable[[Viewed[S]], Mapping[str, Any]]
Attribute = Callable[[Viewed[S]], object]
