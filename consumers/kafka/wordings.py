"""A gate's or an executor's start, for the release it runs (D121: its owners signed it, when the app
declares owners, consumers/kafka/releases.py) and the tool wording it deploys (D119): a tool whose egress the
deploy widens, against the wording deployed before, is refused unless the app names it in
`App.refresh` (the executor enforces the loaded code's egress for every task, sleeping ones too);
else the deployed wording is published under its digest, so a task stamped with it is shown it
later. Runs as the role builds its handler, before any message: a Redis that does not answer is
waited for (the role could do nothing without it), unless the role is already told to stop."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import redis

from wakeful.consumers.kafka import releases
from wakeful.core.errors import ConfigError
from wakeful.core.log import Log
from wakeful.sdk.app import App
from wakeful.state.wording import Wordings
from wakeful.workflow import release_digest, wording

WAIT_S = 1.0  # between reads of a Redis that did not answer


def deploy(client: Any, app: App, stop: threading.Event, log: Log) -> None:
    tried = 0
    while True:  # ends: deployed, refused, or told to stop while Redis does not answer
        try:
            return _deploy(client, app)
        except redis.exceptions.NoPermissionError as exc:
            raise ConfigError(
                "Redis users",
                f"this role may not read the tool wordings or releases ({exc}): reload them with "
                "`wakeful admin acl --apply` (or `wakeful dev up`)",
            ) from exc
        except redis.RedisError as exc:
            if stop.is_set():
                return None
            tried += 1
            if tried == 1 or tried % 30 == 0:
                log("role.wording_unread", error=repr(exc), tried=tried)
            stop.wait(WAIT_S)


def _deploy(client: Any, app: App) -> None:
    releases.check(client, app)  # an app whose owners have not signed this release does not start
    stored = Wordings(client, app.name)
    read = wording.Read(stored.raw)
    current = stored.current()
    widened = wording.widened(app, read(current) if current else None)
    if widened:
        raise ConfigError(
            "App.refresh",
            f"app {app.name} widens the egress of tools that sleeping tasks use: {'; '.join(widened)}. "
            "Name each in App(refresh=[...]) to let every task reach it, or keep the egress as it "
            "was (`wakeful release check --app ...` shows the change)",
        )
    digest, raw = wording.deployed(app)
    if digest != current:
        stored.publish(digest, raw)
    stored.publish_release(orjson.dumps(release_digest.parts(app)))  # what the next check diffs against
