"""The one CLI: `wakeful`. Settings are read once here and handed down.

A command's module is imported when it runs (cli/lazy.py): a role process imports its role and
`wakeful worker`, not the operator tools, the benches and the ops page."""

from __future__ import annotations

import sys

import click
from redis.exceptions import ConnectionError as RedisConnectionError

from wakeful.cli.lazy import LazyGroup, Where
from wakeful.core.errors import WakefulError
from wakeful.core.settings import Settings

# The commands that may change authority: each publishes a fresh sealed copy when it did (D70).
CHANGES_AUTHORITY = frozenset({"authority", "tools", "freeze", "thaw", "demo", "release", "schedule"})


def _task() -> click.Command:
    from wakeful.cli.cancel_cmd import task_cancel
    from wakeful.cli.purge_cmds import task_purge
    from wakeful.cli.release_cmds import task_release
    from wakeful.cli.search_cmds import task_query, task_search
    from wakeful.cli.task_cmds import task

    task.add_command(task_release)
    task.add_command(task_purge)
    task.add_command(task_cancel)
    task.add_command(task_query)
    task.add_command(task_search)
    return task


def _authority() -> click.Command:
    from wakeful.cli.authority_cmds import authority, signers
    from wakeful.cli.credential_cmds import credentials
    from wakeful.cli.kill_cmds import revoke_signer, unrevoke_signer
    from wakeful.cli.limit_cmds import limits
    from wakeful.cli.recover_cmd import backup

    authority.add_command(backup)
    authority.add_command(limits)
    authority.add_command(credentials)
    signers.add_command(revoke_signer)
    signers.add_command(unrevoke_signer)
    return authority


COMMANDS: dict[str, Where] = {
    "dev": "wakeful.cli.dev_cmds:dev",
    "admin": "wakeful.cli.admin_cmds:admin",
    "keys": "wakeful.cli.keys_cmds:keys",
    "audit": "wakeful.cli.audit_cmds:audit_cmd",
    "log": "wakeful.cli.audit_cmds:log_group",
    "bench": "wakeful.cli.bench_cmds:bench",
    "chaos": "wakeful.cli.bench_cmds:chaos",
    "bench-retention": "wakeful.cli.bench_cmds:bench_retention",
    "bench-recover": "wakeful.cli.bench_cmds:bench_recover",
    "bench-state": "wakeful.cli.bench_cmds:bench_state",
    "bench-fair": "wakeful.cli.bench_cmds:bench_fair",
    "worker": "wakeful.cli.worker_cmd:worker",
    "demo": "wakeful.cli.demo_cmd:demo",
    "task": _task,
    "ledger": "wakeful.cli.task_cmds:ledger",
    "release": "wakeful.cli.rollout_cmds:release",  # check, propose, sign, show, rollout, promote, rollback
    "authority": _authority,
    "recover": "wakeful.cli.recover_cmd:recover",
    "freeze": "wakeful.cli.kill_cmds:freeze",
    "thaw": "wakeful.cli.kill_cmds:thaw",
    "frozen": "wakeful.cli.kill_cmds:show_frozen",
    "tools": "wakeful.cli.tools_cmds:tools",
    "schedule": "wakeful.cli.schedule_cmds:schedule",
    "memory": "wakeful.cli.memory.commands:memory",
    "new-agent": "wakeful.cli.scaffold:new_agent",
    "ingress": "wakeful.cli.ingress_cmd:ingress",
    "bench-ingress": "wakeful.cli.ingress_cmd:bench_ingress",
    "dlq": "wakeful.cli.dlq_cmds:dlq",
    "ops": "wakeful.cli.ops_cmd:ops",
}


@click.group(cls=LazyGroup, lazy=COMMANDS)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """wakeful: durable, safe long-running agent tasks on Kafka and Redis."""
    ctx.obj = Settings.from_env()
    if ctx.invoked_subcommand in CHANGES_AUTHORITY:
        from wakeful.cli.recover_cmd import journal

        # After a command that may have changed authority, however it ends (a freeze not yet
        # taken in exits non-zero): its sealed copy on Kafka (D70).
        settings = ctx.obj
        ctx.call_on_close(lambda: journal(settings))


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
