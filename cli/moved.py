"""An old command name kept working after its command moved (D96): the same function, options,
output and exit code, with one line on stderr that says where the command went."""

from __future__ import annotations

import inspect
from typing import Any

import click


class MovedCommand(click.Command):
    """`old` (e.g. `wakeful dev kafka-acl`) runs `target`, now at `new` (`wakeful admin kafka-acl`)."""

    def __init__(self, old: str, new: str, target: click.Command) -> None:
        notice = f"Deprecated: it is now `{new}`."
        super().__init__(
            name=old.rsplit(" ", 1)[-1],
            callback=target.callback,
            params=target.params,
            help=f"{notice}\n\n{inspect.cleandoc(target.help or '')}".rstrip(),
            short_help=notice,
        )
        self.old, self.new, self.target = old, new, target

    @property
    def notice(self) -> str:
        """The one line the old name prints on stderr before it runs the command."""
        return f"`{self.old}` is deprecated: it is now `{self.new}`"

    def invoke(self, ctx: click.Context) -> Any:
        click.echo(self.notice, err=True)
        return super().invoke(ctx)


def keep_old_names(
    old_group: click.Group, old_path: str, new_group: click.Group, new_path: str, names: tuple[str, ...]
) -> None:
    """Register in `old_group`, under its old name, an alias of each of `names`, now in `new_group`:
    only the commands that moved (one added to `new_group` later has no old name to keep)."""
    for name in names:
        command = new_group.commands[name]
        old_group.add_command(MovedCommand(f"{old_path} {name}", f"{new_path} {name}", command))
