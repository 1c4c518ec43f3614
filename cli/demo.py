"""`wakeful demo [--app ...]`: the loaded app's story on the real pipeline, each step checked.

The harness starts the local stack (if none is configured) and a fleet of workers with the
deliberately gullible model (or, with WAKEFUL_MODEL=openai, the chat-completions server that
WAKEFUL_MODEL_URL names: `wakeful dev model-server --script gullible` is one), restores the local
authority defaults (dev signers for the app), then tells the app's story (`App.story`,
module:function): each step says what should happen and checks that it did. The bundled example
apps keep theirs beside them in `examples/` (`*_story.py`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from wakeful.core.errors import ConfigError
from wakeful.core.process import Say
from wakeful.core.settings import Settings
from wakeful.devstack import stack
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.sdk.app import App, load_app

WORKERS_START_S = 180.0  # six interpreters importing the Kafka clients, on a small busy machine


class Demo:
    def __init__(self, settings: Settings, say: Say) -> None:
        self.settings = settings
        self.say = say
        self._client: Client | None = None
        self.failures: list[str] = []

    @property
    def client(self) -> Client:
        """Built once the stack is up: on a fresh machine there are no credentials before that."""
        if self._client is None:
            self._client = Client(self.settings)
        return self._client

    def check(self, step: str, ok: bool, shown: str) -> None:
        self.say(f"  {'ok  ' if ok else 'FAIL'} {step}: {shown}")
        if not ok:
            self.failures.append(step)

    def run(self) -> bool:
        tell = story_of(load_app(self.settings.app))  # before anything is started
        self.say("starting the local stack (if needed) ...")
        stack.up(self.settings, self.say)
        # The story needs a model that falls for planted evidence: gullible, unless one is served.
        model = "openai" if self.settings.model == "openai" else "gullible"
        fleet = Fleet({**os.environ, "WAKEFUL_MODEL": model})
        shown = (
            f"openai: {self.settings.model_name} at {self.settings.model_url}" if model == "openai" else model
        )
        self.say(f"starting the workers for app {self.client.app.name} ({shown} proposer) ...")
        fleet.start()  # first: refused while another fleet runs, before anything is changed
        try:
            self.client.reset_authority()
            late = fleet.wait_started(WORKERS_START_S)
            if late:
                self.check(
                    "workers start",
                    False,
                    f"{', '.join(late)} not started after {WORKERS_START_S:.0f}s; logs in {fleet.dir}",
                )
                return False
            tell(self, fleet)
        finally:
            fleet.stop()
            self.client.close()
        return not self.failures


Story = Callable[[Demo, Fleet], None]


def story_of(app: App) -> Story:
    """The app's demo story; a one-line error when it has none."""
    if not app.story:
        raise ConfigError("--app", f"app {app.name} has no demo story: give it App(story='module:function')")
    module, _, name = app.story.partition(":")
    found = getattr(importlib.import_module(module), name, None)
    if not callable(found):
        raise ConfigError("--app", f"app {app.name}'s story {app.story!r} is not a function")
    story: Story = found
    return story


def line(receipt: dict[str, Any]) -> str:
    return f"{receipt['status']}: {receipt['reason']}"
