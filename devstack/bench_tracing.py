"""`wakeful bench --tracing`: the fleet exports every span over OTLP/HTTP to a receiver the bench
runs in its own process (devstack/otlp_receiver.py), so the roles pay for a real export; without
the option the roles run with tracing off, whatever OTEL_* settings the shell has (D75)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wakeful.devstack.otlp_receiver import Receiver

# The settings that turn tracing on in a role (core/tracing.configured): dropped for a run without it.
SWITCHES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def receiver(on: bool) -> Receiver | None:
    """A started receiver for a run with tracing, else None."""
    return Receiver(keep=0).start() if on else None  # counts spans, keeps none: a long run stays small


def env(base: Mapping[str, str], found: Receiver | None) -> dict[str, str]:
    """The roles' environment: exporting to `found`, or with tracing off."""
    out = {k: v for k, v in base.items() if k not in SWITCHES}
    if found is not None:
        out["OTEL_EXPORTER_OTLP_ENDPOINT"] = found.endpoint
        out.pop("OTEL_SDK_DISABLED", None)
    return out


def figures(found: Receiver | None, done: int) -> dict[str, Any] | None:
    """What was exported (read once the fleet has stopped: its last batches are flushed then)."""
    if found is None:
        return None
    spans = found.count()
    found.stop()
    return {"spans": spans, "spans_per_task": round(spans / max(1, done), 2), "exports": found.requests}


def render(figures: Mapping[str, Any] | None) -> list[str]:
    if not figures:
        return ["tracing         : off"]
    return [
        f"tracing         : on, {figures['spans']} spans exported over OTLP/HTTP "
        f"({figures['spans_per_task']} per task, {figures['exports']} requests)"
    ]
