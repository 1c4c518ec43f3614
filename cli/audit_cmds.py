"""`wakeful audit TASK`, `wakeful log export TASK` and `wakeful keys export` (D72, docs/audit.md).

With `--log FILE --keys FILE` the audit opens no connection at all: it needs neither Kafka nor Redis,
only the files. Without `--log` it reads the task's partition of wakeful.log as the Kafka admin;
without `--keys` it reads the public keys from this machine (the relay's published log keys and the
signer registry in Redis, as the admin).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import orjson

from wakeful.cli.output import emit, say
from wakeful.core import ids
from wakeful.core.settings import Settings
from wakeful.operate.audit import read as audit_read
from wakeful.operate.audit.chain import Audit, audit
from wakeful.operate.audit.file import PublicKeys, message_line
from wakeful.schemas.signatures import VerifyKey


def _signers(settings: Settings) -> list[tuple[VerifyKey, frozenset[str]]]:
    """Every registered signer of events, from the registry in Redis (as the admin)."""
    from wakeful.authority.snapshot import decode_signer
    from wakeful.state import acl, keys
    from wakeful.state.replies import hash_reply

    registry = hash_reply(acl.connect(settings, "admin").hgetall(keys.AUTH_SIGNERS))
    return [decode_signer(kid.decode(), raw) for kid, raw in sorted(registry.items())]


def _keys(settings: Settings, keys_file: Path | None) -> PublicKeys:
    if keys_file is not None:
        return audit_read.keys_from_file(keys_file)
    return audit_read.keys_here(settings, _signers(settings))


@click.command("audit")
@click.argument("task_id")
@click.option("--verify", is_flag=True, help="Check every link; exit 1 when one does not hold.")
@click.option(
    "--log",
    "log_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Read the task's messages from this file (wakeful log export), not from Kafka.",
)
@click.option(
    "--keys",
    "keys_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Read the public keys from this file (wakeful keys export), not from this machine.",
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def audit_cmd(
    settings: Settings,
    task_id: str,
    verify: bool,
    log_file: Path | None,
    keys_file: Path | None,
    as_json: bool,
) -> None:
    """For every effect of TASK: the event that started it, each approval, the policy and tool
    catalog in force, the proposal and its model and checks, the op key, fence and outcome."""
    _task_id(task_id)
    for given in (log_file, keys_file):  # checked when run: a command line parses wherever it is read
        if given is not None and not given.is_file():
            raise click.BadParameter(f"no file {given}", param_hint="--log/--keys")
    public = _keys(settings, keys_file)
    messages = audit_read.from_file(log_file) if log_file else list(audit_read.from_kafka(settings, task_id))
    found = audit(task_id, messages, public)
    doc = found.doc()
    if keys_file is None:  # on this machine: each release's owners' sign-offs, from Redis (D121)
        _signed_releases(settings, doc)
    emit(doc, as_json, _human(found, verify))  # the same effects: the sign-offs show in both
    if verify and not found.verified:
        sys.exit(1)


def _signed_releases(settings: Settings, doc: dict[str, Any]) -> None:
    """Add to each effect's proposal the sign-offs of the release that ran it, as stored."""
    from wakeful.authority import signoffs
    from wakeful.state import acl
    from wakeful.state.releases import Releases

    admin, seen = acl.connect(settings, "admin"), {}
    for effect in doc.get("effects", []):
        proposal = effect.get("proposal") or {}
        if digest := proposal.get("release"):
            if digest not in seen:
                read = [signoffs.decode(raw) for raw in Releases.signed(admin, digest)]
                seen[digest] = [
                    {"role": s.role, "principal": s.principal, "key": s.key_id, "at": s.signed_at}
                    for s in read
                    if not isinstance(s, str)
                ]
            proposal["signoffs"] = seen[digest]


def _shown(proposal: dict[str, Any]) -> list[str]:
    """The tool wording the model was shown for the proposal (D119), and the release that ran it
    with its owners' sign-offs (D121), where the log names them."""
    lines = []
    if proposal.get("catalog"):
        fresh = f", refreshed: {', '.join(proposal['refreshed'])}" if proposal.get("refreshed") else ""
        lines.append(f"  the model was shown the tools of {proposal['catalog']}{fresh}")
    if proposal.get("release"):
        signed = ", ".join(f"{s['principal']} ({s['role']}, {s['at']})" for s in proposal.get("signoffs", []))
        lines.append(f"  release {proposal['release'][:12]}, signed by {signed or 'no owner'}")
    return lines


def _human(found: Audit, verify: bool) -> str:
    lines = [f"task {found.task_id}: {len(found.changes)} changes in {found.messages} log messages"]
    if found.started:
        lines.append(f"started by {_event(found.started)}")
    for a in found.approvals:
        b = a["bound"]
        lines.append(
            f"approval by {b['approver']} of version {b['version']} (terms {b['digest'][:16]}), "
            f"change {a['version']} at {a['where']}: {_event(a['event']) if a['event'] else 'no event'}"
        )
    for e in found.effects:
        p, a = e["proposal"] or {"message_id": "(none on the log)", "model": "?", "checks": []}, e["approval"]
        result = orjson.dumps(e["result"]).decode() if e["result"] else ""
        lines += [
            f"effect {e['op_key']}: {e['tool']}({_args(e['args'])}) at task version {e['task_version']}",
            f"  proposal {p['message_id']} by model {p['model']}; checks passed: {', '.join(p['checks'])}",
            *_shown(p),
            f"  policy {e['policy']}, tool catalog {e['tool_catalog']}",
            f"  fence {e['fence']}, outcome {e['outcome']} {result}".rstrip(),
            "  approval: " + (f"by {a['approver']} of version {a['version']}" if a else "none"),
        ]
    lines += [f"in flight: {op}" for op in found.in_flight]
    if not verify and found.problems:
        lines.append(f"{len(found.problems)} link(s) do not hold: --verify names them")
    if verify:
        lines += [f"FAILED {p}" for p in found.problems]
        lines.append(
            "verified: every link holds"
            if found.verified
            else f"NOT verified: {len(found.problems)} problem(s)"
        )
    return "\n".join(lines)


def _event(e: dict[str, Any]) -> str:
    who = e["principal"] or "?"
    return f"{e['kind']} {e['event_id']} signed by {who} (key {e['key_id']}, {e.get('verified')})"


def _args(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in args.items())


@click.group("log")
def log_group() -> None:
    """wakeful.log, the replayable audit and recovery log."""


@log_group.command("export")
@click.argument("task_id")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), required=True)
@click.pass_obj
def log_export(settings: Settings, task_id: str, out: Path) -> None:
    """The task's log messages, raw, with their headers, partition and offset: one JSON per line.
    A task the log holds nothing of is refused, and no file is written."""
    _task_id(task_id)
    count = 0
    partial = out.with_name(f".{out.name}.partial")
    try:
        with partial.open("wb") as f:
            for m in audit_read.from_kafka(settings, task_id):
                f.write(message_line(m))
                count += 1
        if count == 0:
            raise click.ClickException(
                f"wakeful.log holds no message of task {task_id}: check the id (the runtime's, as "
                "`wakeful task list` shows it, tenant prefix and all); nothing was written"
            )
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    say(f"wrote {count} log messages of task {task_id} to {out}")


def _task_id(task_id: str) -> str:
    """A task id as the runtime names tasks, or a usage error that shows the shape."""
    if not ids.TASK_ID_RE.fullmatch(task_id):
        raise click.BadParameter(
            f"{task_id!r} is not a task id (an optional `tenant.` prefix, then up to 64 letters, digits, "
            "`_` or `-`: `wakeful task list` shows them)",
            param_hint="TASK_ID",
        )
    return task_id


@click.command("export")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), required=True)
@click.pass_obj
def keys_export(settings: Settings, out: Path) -> None:
    """The public keys an offline `wakeful audit --verify` needs: the relay's log keys and every
    registered event signer's (an HMAC signer is listed without its secret)."""
    out.write_bytes(audit_read.exported_keys(settings, _signers(settings)))
    say(f"wrote the log and signer public keys to {out}")


@click.command("rotate-log")
@click.pass_obj
def keys_rotate_log(settings: Settings) -> None:
    """A new Ed25519 log key for the relay; every older public half stays published, so what it
    signed still verifies. Export the keys again afterwards."""
    from wakeful.core import log_signing

    kid = log_signing.rotate_log_key(settings)
    click.echo(f"the relay's log key is now {kid}")
    say("restart the relay so it signs with it, then run `wakeful keys export` again")
