"""The one CLI: `wakeful`. Settings are read once here and handed down."""

from __future__ import annotations

import sys

import click
from redis.exceptions import ConnectionError as RedisConnectionError

from wakeful.cli import audit_cmds
from wakeful.cli.admin_cmds import admin
from wakeful.cli.authority_cmds import authority, signers
from wakeful.cli.bench_cmds import bench, bench_recover, bench_retention, bench_state, chaos
from wakeful.cli.demo_cmd import demo
from wakeful.cli.dev_cmds import dev
from wakeful.cli.dlq_cmds import dlq
from wakeful.cli.ingress_cmd import bench_ingress, ingress
from wakeful.cli.keys_cmds import keys
from wakeful.cli.kill_cmds import freeze, revoke_signer, show_frozen, thaw, unrevoke_signer
from wakeful.cli.memory.commands import memory
from wakeful.cli.ops_cmd import ops
from wakeful.cli.purge_cmds import task_purge
from wakeful.cli.recover_cmd import CHANGES_AUTHORITY, backup, journal, recover
from wakeful.cli.release_cmds import release, task_release
from wakeful.cli.scaffold import new_agent
from wakeful.cli.task_cmds import ledger, task
from wakeful.cli.tools_cmds import tools
from wakeful.cli.worker_cmd import worker
from wakeful.core.errors import WakefulError
from wakeful.core.settings import Settings


@click.group()
@click.pass_context
def cli(ctx: click.Context) -> None:
    """wakeful: durable, safe long-running agent tasks on Kafka and Redis."""
    ctx.obj = Settings.from_env()
    if ctx.invoked_subcommand in CHANGES_AUTHORITY:
        # After a command that may have changed authority, however it ends (a freeze not yet
        # taken in exits non-zero): its sealed copy on Kafka (D70).
        settings = ctx.obj
        ctx.call_on_close(lambda: journal(settings))


cli.add_command(dev)
cli.add_command(admin)
cli.add_command(keys)
cli.add_command(audit_cmds.audit_cmd)
cli.add_command(audit_cmds.log_group)
cli.add_command(bench)
cli.add_command(chaos)
cli.add_command(bench_retention)
cli.add_command(bench_recover)
cli.add_command(bench_state)
cli.add_command(worker)
cli.add_command(demo)
cli.add_command(task)
task.add_command(task_release)
task.add_command(task_purge)
cli.add_command(ledger)
cli.add_command(release)
cli.add_command(authority)
authority.add_command(backup)
cli.add_command(recover)
cli.add_command(freeze)
cli.add_command(thaw)
cli.add_command(show_frozen)
signers.add_command(revoke_signer)
signers.add_command(unrevoke_signer)
cli.add_command(tools)
cli.add_command(memory)
cli.add_command(new_agent)
cli.add_command(ingress)
cli.add_command(bench_ingress)
cli.add_command(dlq)
cli.add_command(ops)


def main() -> None:
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except WakefulError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except RedisConnectionError as exc:  # the server went away mid-command
        click.echo(f"error: lost Redis ({exc}); `wakeful dev status` shows what is running", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
