"""A gate's or an executor's start, for the tool wording it deploys (D119): a tool whose egress the
deploy widens, against the wording deployed before, is refused unless the app names it in
`App.refresh` (the executor enforces the loaded code's egress for every task, sleeping ones too);
else the deployed wording is published under its digest, so a task stamped with it is shown it
later. Returns the reader of stored wordings, by digest, that the gate's windows use."""

from __future__ import annotations

from typing import Any

from wakeful.core.errors import ConfigError
from wakeful.sdk.app import App
from wakeful.state.wording import Wordings
from wakeful.workflow import wording


def deploy(client: Any, app: App) -> wording.Read:
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
    return read
