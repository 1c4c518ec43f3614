"""Structured logs: one JSON object per line on stderr, with the bound context (role, task, ids).

The Kafka client libraries' own log lines come out the same way, as `kafka.log` records at or above
WAKEFUL_LOG_LEVEL, never in their own formats: every confluent-kafka client wakeful builds takes
`librdkafka_config()` (a role's group consumer `librdkafka_consumer_config()`), and kafka-python's
`kafka` logger is routed by `route_client_logs()`.

Never pass secrets or evidence bodies as fields.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import threading
import time
from typing import Any

import orjson

from wakeful.core import settings


class Log:
    def __init__(self, **bound: Any) -> None:
        self._bound = bound

    def bind(self, **more: Any) -> Log:
        return Log(**self._bound, **more)

    def __call__(self, event: str, **fields: Any) -> None:
        record = {"ts": round(time.time(), 3), "event": event, **self._bound, **fields}
        sys.stderr.buffer.write(orjson.dumps(record, default=str) + b"\n")
        sys.stderr.flush()

    def each(self, event: str, records: list[dict[str, Any]]) -> None:
        """One line per record, as many calls would write them, in one write."""
        if records:
            head = {"ts": round(time.time(), 3), "event": event, **self._bound}
            sys.stderr.buffer.write(b"".join(orjson.dumps(head | r, default=str) + b"\n" for r in records))
            sys.stderr.flush()


# WAKEFUL_LOG_LEVEL -> (the stdlib level of the lowest line written, librdkafka's `log_level`), so
# that librdkafka does not even queue the lines that would be dropped.
_THRESHOLDS = {
    "debug": (logging.DEBUG, 7),
    "info": (logging.INFO, 6),
    "warning": (logging.WARNING, 4),
    "error": (logging.ERROR, 3),
}
# confluent-kafka maps librdkafka's syslog levels to stdlib ones before the logger sees them:
# 0-2 critical, 3 error, 4 warning, 5-6 (notice, info) info, 7 debug.
_NAMES = {
    logging.CRITICAL: "critical",
    logging.ERROR: "error",
    logging.WARNING: "warning",
    logging.INFO: "info",
    logging.DEBUG: "debug",
}
_THREAD = re.compile(r"\[thrd:([^\]]*)\]: ")

LIBRDKAFKA = logging.getLogger("wakeful.librdkafka")
KAFKA_PYTHON = logging.getLogger("kafka")  # kafka-python's modules log under it

_routing = threading.Lock()


class _ClientLines(logging.Handler):
    """Writes each log record of a Kafka client library as one `kafka.log` record."""

    def __init__(self, log: Log) -> None:
        super().__init__()
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._log("kafka.log", level=_NAMES.get(record.levelno, "info"), **_fields(record))
        except Exception:  # a log line that cannot be written must not break the client's call
            self.handleError(record)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    if record.name == LIBRDKAFKA.name and isinstance(record.args, tuple) and len(record.args) == 3:
        # confluent-kafka logs ("%s [%s] %s", facility, client name, message).
        facility, client, text = (str(arg) for arg in record.args)
        fields: dict[str, Any] = {"library": "librdkafka", "facility": facility, "client": client}
        if thread := _THREAD.match(text):
            fields["thread"] = thread.group(1)
            text = text[thread.end() :]
        return fields | {"message": text}
    fields = {"library": "kafka-python", "facility": record.name, "message": record.getMessage()}
    if record.exc_info and record.exc_info[1] is not None:
        fields["error"] = repr(record.exc_info[1])
    return fields


def route_client_logs() -> str:
    """Route the Kafka client libraries' log lines through Log, those at WAKEFUL_LOG_LEVEL and above.

    Once per process; returns the level. Read from the environment (validated by the same function
    that Settings.from_env uses) because clients are also built where no Settings object is at hand.
    """
    with _routing:  # two threads building their first clients at once must not add two handlers
        return _route_once()


@functools.cache
def _route_once() -> str:
    level = settings.log_level_from(os.environ)
    threshold, _ = _THRESHOLDS[level]
    handler = _ClientLines(Log())
    # kafka-python's DEBUG lines print whole requests, event bodies included: never below INFO.
    for logger, floor in ((LIBRDKAFKA, threshold), (KAFKA_PYTHON, max(threshold, logging.INFO))):
        logger.addHandler(handler)
        logger.setLevel(floor)
        logger.propagate = False  # written once, here; not again by a handler on the root
    return level


def librdkafka_config() -> dict[str, Any]:
    """What every confluent-kafka Producer, Consumer and AdminClient wakeful builds adds to its
    configuration, so librdkafka's lines never reach stderr in its raw `%N|...` format.

    The lines are then delivered from that client's poll(), consume() and flush() calls, in the
    calling thread: a short-lived AdminClient must be polled before it is dropped.
    """
    level = route_client_logs()
    return {"logger": LIBRDKAFKA, "log_level": _THRESHOLDS[level][1]}


def librdkafka_consumer_config() -> dict[str, Any]:
    """What a role's group consumer takes instead: no `logger` and no callback at all (D27).

    confluent-kafka serves a logger's lines (and error_cb's events) from the consumer's own queue,
    and with either set, a broker restart of a few seconds left group consumers stalled or fenced
    for good. A consumer's errors still come out structured: without error_cb they arrive as error
    messages from poll()/consume(), which the runner writes as `runner.consume_error`; librdkafka's
    own lines are kept to the emergencies it never writes in practice.
    """
    route_client_logs()
    return {"log_level": 0}
