"""`wakeful keys`: the sealing keyring (rotate, list) and the audit's public keys (D72)."""

from __future__ import annotations

import click

from wakeful.cli import audit_cmds
from wakeful.cli.output import emit, say
from wakeful.core.settings import Settings


@click.group()
def keys() -> None:
    """The sealing keyring (WAKEFUL_KEYRING)."""


@keys.command("rotate")
@click.option("--id", "kid", default=None, help="Id of the new key (default: generated).")
@click.pass_obj
def keys_rotate(settings: Settings, kid: str | None) -> None:
    """Add a new active key; old keys stay so every stored blob stays readable."""
    from wakeful.state.seal import Keyring

    ring = Keyring.load(settings.keyring).rotated(kid)
    ring.save(settings.keyring)
    click.echo(f"active key is now {ring.active}; keys: {', '.join(ring.kids)}")
    say("restart the workers so they load it; blobs are re-sealed with it as tasks move")


@keys.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def keys_list(settings: Settings, as_json: bool) -> None:
    """Key ids in the keyring and which one seals new blobs (never the keys)."""
    from wakeful.state.seal import Keyring

    ring = Keyring.load(settings.keyring)
    emit(
        {"active": ring.active, "kids": ring.kids},
        as_json,
        f"active: {ring.active}; keys: {', '.join(ring.kids)}",
    )


keys.add_command(audit_cmds.keys_export)  # the public keys an offline audit needs (D72)
keys.add_command(audit_cmds.keys_rotate_log)
