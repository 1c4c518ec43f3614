"""What a task shows its tenant's readers without being unsealed: its workflow's views and search
attributes (sdk/views.py), computed by the writer from the new checkpoint at every change (D107).

The writer (gate, executor, the operator's release) holds the app and the unsealed checkpoint; the
log record it writes carries what this computes, and the relay keeps the task index from it. The
app's code runs inside a task's change here, so nothing it does may stop the change: whatever a
view or an attribute raises or returns, `shown` returns, and what it returns fits the record.

- a view gives a JSON object of at most VIEW_BYTES encoded; one that raises, or returns anything
  else, shows {"error": "<what is wrong>"} in its place, so the reader sees why;
- an attribute gives a text of at most ATTRIBUTE_CHARS: a bool is "true" or "false", a number its
  digits, a str itself; one that raises, returns None or anything else, or is longer, is left out
  (a search finds the task under no value, never under a wrong one).

Pure: it reads the checkpoint and the app's declarations, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from wakeful.core import ids
from wakeful.schemas.base import cut
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.sdk.views import Attribute, View, Viewed
from wakeful.sdk.workflow import Workflow
from wakeful.workflow import engine

VIEW_BYTES = 4096  # a view's JSON, at most: the record carries every view at every change
ATTRIBUTE_CHARS = 200  # an attribute's text, at most: it names an index set
ERROR_CHARS = 200  # of an exception's message, in the error a view shows


@dataclass(frozen=True)
class Shown:
    """What one checkpoint shows: views (name -> a JSON object) and attributes (name -> text)."""

    views: dict[str, dict[str, Any]] = field(default_factory=dict)
    attributes: dict[str, str] = field(default_factory=dict)


NOTHING = Shown()  # what a workflow that declares none shows: shared, never changed


def shown(app: App) -> Callable[[Checkpoint], Shown]:
    """What a checkpoint of `app` shows, by the declarations of the workflow version it runs (a
    task pinned to a version the app keeps shows that version's). Never raises."""
    declaring = {
        (wf.name, wf.version): wf for wf in (*app.retired, *app.workflows) if wf.views or wf.attributes
    }
    if not declaring:  # every change of every task asks: an app that declares none pays nothing
        return lambda cp: NOTHING

    def show(cp: Checkpoint) -> Shown:
        wf = declaring.get((cp.business.workflow, cp.business.workflow_version))
        return NOTHING if wf is None else of(wf, cp)

    return show


def of(wf: Workflow[Any], cp: Checkpoint) -> Shown:
    """What `cp` shows by `wf`'s declarations. A state its model does not read shows each view as
    that error and no attribute."""
    try:
        viewed = _viewed(wf, cp)
    except Exception as exc:  # the app's model refused the stored state: the change goes on
        # Its type alone: a validation error's message quotes the state, which no view chose to show.
        error = {"error": f"the task's state does not read as {wf.state.__name__}: {type(exc).__name__}"}
        return Shown({name: error for name in wf.views}, {})
    attributes = {name: attribute(fn, viewed) for name, fn in wf.attributes.items()}
    return Shown(
        {name: view(fn, viewed) for name, fn in wf.views.items()},
        {name: text for name, text in attributes.items() if text is not None},
    )


def _viewed(wf: Workflow[Any], cp: Checkpoint) -> Viewed[Any]:
    tenant = cp.security.tenant
    return Viewed(
        task_id=ids.named_by(tenant, cp.task_id),
        stage=cp.stage,
        version=cp.business.version,
        state=engine.state_of(wf, cp),
        tenant=tenant,
        requester=engine.requester(cp),
        created_at=cp.created_at,
        updated_at=cp.updated_at,
        waits=tuple(w.wait_for for w in cp.execution.pending_waits),
    )


def view(fn: View[Any], viewed: Viewed[Any]) -> dict[str, Any]:
    """What the view `fn` shows of `viewed`: its JSON object, or {"error": why not}."""
    try:
        got = fn(viewed)
    except Exception as exc:  # the app's bug: shown to the reader, never raised into the change
        return {"error": _said(exc)}
    if not isinstance(got, Mapping):
        return {"error": f"the view returned {type(got).__name__}, not a mapping"}
    try:
        encoded = orjson.dumps(dict(got))
    except Exception as exc:  # orjson's TypeError, or the mapping's own failure to be read
        return {"error": f"the view is not JSON: {_said(exc)}"}
    if len(encoded) > VIEW_BYTES:
        return {"error": f"the view is {len(encoded)} bytes of JSON, over {VIEW_BYTES}"}
    shown: dict[str, Any] = orjson.loads(encoded)  # plain JSON values, as the record writes them
    return shown


def attribute(fn: Attribute[Any], viewed: Viewed[Any]) -> str | None:
    """What the attribute `fn` gives `viewed`, as text, or None: it is left out."""
    try:
        return text(fn(viewed))
    except Exception:  # the app's bug: the task is found under no value of it
        return None


def text(value: object) -> str | None:
    """`value` as an attribute's text, or None when it cannot be one. Each type is written as its
    base type writes it, whatever a subclass (an enum member, say) says of itself."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if value.bit_length() > 700:  # over 200 digits; far past it, int.__repr__ refuses to print
            return None
        written = int.__repr__(value)
    elif isinstance(value, float):
        written = float.__repr__(value)
    elif isinstance(value, str):
        written = str.__str__(value)
    else:
        return None
    return written if len(written) <= ATTRIBUTE_CHARS and _utf8(written) else None


def _utf8(written: str) -> bool:
    """Whether `written` can be JSON on the log (a lone surrogate cannot)."""
    try:
        written.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _said(exc: BaseException) -> str:
    """`<ExcType>: <message>` of an exception the app's code raised, its message cut, never raising
    itself (a message may fail to print, or hold what JSON cannot carry)."""
    try:
        message = cut(str(exc), ERROR_CHARS)
    except Exception:
        message = "(its message cannot be printed)"
    safe = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return f"{type(exc).__name__}: {safe}"
