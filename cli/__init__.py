"""cli: the `wakeful` command, which every role process is started as."""

import sys

# redis-py imports OpenTelemetry's metrics SDK at its own import whenever it is installed (the
# `tracing` extra), to record command metrics that nothing here turns on: about 60 ms at every
# start of every command and role process. Blocked before anything imports redis; wakeful's traces
# use the trace SDK alone (core/trace_spans.py, D75). A process that loaded it first keeps it.
sys.modules.setdefault("opentelemetry.sdk.metrics", None)  # type: ignore[arg-type]  # None blocks an import
