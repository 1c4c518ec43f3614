"""A click group whose commands are imported when one is run, not when the CLI starts.

Every `wakeful` process starts through cli/main.py: each role a supervisor or a test starts, and
every command an operator or a script runs. Importing every command module up front cost each of
them about 0.4 s of CPU (the operator tools, the benches, the ops page, the SDK), for one command.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping

import click

# Where a command is: "package.module:attribute", or a function that imports and returns it (a
# group that is assembled from several modules).
Where = str | Callable[[], click.Command]


def load(where: Where) -> click.Command:
    if callable(where):
        return where()
    module, _, attribute = where.partition(":")
    command = getattr(importlib.import_module(module), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{where} is no click command")
    return command


class LazyGroup(click.Group):
    """A group of named commands, each imported the first time it is looked up. `commands` loads
    them all (for help on every command and for whatever walks the tree)."""

    def __init__(self, *args: object, lazy: Mapping[str, Where], **kwargs: object) -> None:
        self._loaded: dict[str, click.Command] = {}
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._lazy = dict(lazy)

    @property
    def commands(self) -> MutableMapping[str, click.Command]:
        for name in list(self._lazy):
            self._load(name)
        return self._loaded

    @commands.setter
    def commands(self, value: MutableMapping[str, click.Command]) -> None:
        self._loaded = dict(value)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self._loaded, *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            self._load(cmd_name)
        return self._loaded.get(cmd_name)

    def _load(self, name: str) -> None:
        command = load(self._lazy.pop(name))
        if command.name != name:
            raise TypeError(f"the command listed as {name!r} is named {command.name!r}")
        self._loaded[name] = command
