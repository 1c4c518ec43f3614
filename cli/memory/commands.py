"""`wakeful memory ...`: what memory holds, and the operator's hands on it (docs/memory.md).

`list` and `show` read every tenant's records as the admin; `quarantine` (by writer or by time
window) and `revoke` take records out of every window; `release` lets a verifier make a quarantined
record of a fact that is not high-impact active; `forget` deletes whatever came from a source,
following lineage to derived copies. Each change is made by compare-and-swap on the record's
subject (state/memory.py) and kept in its history with who and why.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import click

from wakeful.cli.app_option import app_option
from wakeful.cli.kill_cmds import operator
from wakeful.cli.memory.view import TIME_HELP, caught, chosen, line, picked, principal, shown, stamp
from wakeful.cli.output import emit
from wakeful.core.errors import KeyringError
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.schemas.memory import EVIDENCE_REF, RECORD_ID, SOURCE, MemoryRecord, Status
from wakeful.state.evidence import Evidence
from wakeful.state.memory import MemoryStore, derived
from wakeful.state.seal import Keyring

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
operator_option = click.option(
    "--by", required=True, help="The operator (a signer that may send task.reopen): recorded."
)


@click.group()
def memory() -> None:
    """What memory holds, every tenant's: list, show, quarantine, release, revoke, forget; and the
    evidence documents records cite (document)."""


@memory.command("list")
@click.option("--tenant", default=None, help="Only this tenant's records.")
@click.option("--subject", default=None, help="Only records about this subject (<kind>:<id>).")
@click.option("--status", type=click.Choice([s.value for s in Status]), default=None)
@click.option("--fact", "--class", "fact", default=None, help="Only this fact (class of fact).")
@click.option("--writer", default=None, help="Only this writer (principal:<name> or role:<role>).")
@json_option
@click.pass_obj
def memory_list(settings: Settings, /, as_json: bool, **wanted: str | None) -> None:
    """Every record the options pick, newest first: one line each."""
    records = picked(MemoryStore(Client(settings).admin).every(), **wanted)
    now = datetime.now(UTC)
    human = "\n".join(line(r, now) for r in records) or "no memory records match"
    emit([r.model_dump(mode="json") for r in records], as_json, human)


@memory.command("show")
@click.argument("record_id", metavar="ID")
@json_option
@click.pass_obj
def memory_show(settings: Settings, record_id: str, as_json: bool) -> None:
    """One record whole, with its history (every status it had, who set it and why)."""
    record = _found(MemoryStore(Client(settings).admin), record_id)
    emit(record.model_dump(mode="json"), as_json, shown(record))


@memory.command("quarantine")
@click.option(
    "--writer", default=None, help="Every active record of this writer (principal:<name> or role:<role>)."
)
@click.option("--since", default=None, help=f"With --until: records written from this time on ({TIME_HELP}).")
@click.option("--until", default=None, help=f"With --since: records written before this time ({TIME_HELP}).")
@click.option("--reason", required=True, help="Why: kept in each record's history.")
@operator_option
@json_option
@click.pass_obj
def memory_quarantine(
    settings: Settings,
    writer: str | None,
    since: str | None,
    until: str | None,
    reason: str,
    by: str,
    as_json: bool,
) -> None:
    """Take every active record of a writer, or written in [--since, --until), out of every
    window: it is quarantined, with the reason and who. Records already quarantined or revoked are
    left as they are."""
    who, window = chosen(writer, since, until)
    client = Client(settings)
    operator(client, by)
    store, now = MemoryStore(client.admin, _keyring(settings, needed=False)), datetime.now(UTC)
    moved = [
        store.set_status(r, Status.QUARANTINED, by, reason, now, only_from=frozenset({Status.ACTIVE}))
        for r in store.every()
        if caught(r, who, window)
    ]
    done = sorted(r.id for r in moved if r is not None)
    scope = f"writer {who}" if window is None else f"written in [{stamp(window[0])}, {stamp(window[1])})"
    doc = {"quarantined": done, "writer": who, "since": since, "until": until, "by": by, "reason": reason}
    emit(doc, as_json, "\n".join([f"quarantined {len(done)} active records of {scope}", *done]))


@memory.command("release")
@click.argument("record_id", metavar="ID")
@click.option("--by", required=True, help="A verifier of the record's fact (principal:<name> or <name>).")
@app_option
@json_option
@click.pass_obj
def memory_release(settings: Settings, record_id: str, by: str, as_json: bool) -> None:
    """Make a quarantined record active, as one of its fact's verifiers in the app. Never a record
    of a high-impact fact: that becomes active only through a verifier's own signed event."""
    client = Client(settings)
    store = MemoryStore(client.admin, _keyring(settings, needed=True))
    record, app, who = _found(store, record_id), client.app, principal(by)
    fact = app.fact_table.get(record.fact)
    if fact is None:
        raise click.ClickException(
            f"app {app.name} declares no fact {record.fact!r}: name the app that does with --app MODULE:ATTR"
        )
    if fact.high_impact:
        raise click.ClickException(
            f"{record.fact} is high-impact: a high-impact record becomes active only through a "
            f"verification event signed by one of {', '.join(fact.verifiers) or 'its verifiers'}, "
            "never by a release"
        )
    if who not in fact.verifiers:
        raise click.ClickException(
            f"{who} is not a verifier of {record.fact}: "
            f"only {', '.join(fact.verifiers) or 'nobody'} may release it"
        )
    if record.status is not Status.QUARANTINED:
        raise click.ClickException(
            f"{record.id} is {record.status.value}: only a quarantined record is released"
        )
    updated = _changed(
        store.set_status(
            record,
            Status.ACTIVE,
            who,
            f"released by {who}",
            datetime.now(UTC),
            only_from=frozenset({Status.QUARANTINED}),
        ),
        record,
    )
    emit(updated.model_dump(mode="json"), as_json, f"{record.id} is active: released by {who}")


@memory.command("revoke")
@click.argument("record_id", metavar="ID")
@click.option("--reason", required=True, help="Why: kept in its history.")
@operator_option
@json_option
@click.pass_obj
def memory_revoke(settings: Settings, record_id: str, reason: str, by: str, as_json: bool) -> None:
    """Revoke a record, whatever its status: no window shows it again, and no release brings it back."""
    client = Client(settings)
    operator(client, by)
    store = MemoryStore(client.admin, _keyring(settings, needed=False))
    record = _found(store, record_id)
    if record.status is Status.REVOKED:
        emit(record.model_dump(mode="json"), as_json, f"{record.id} was revoked already")
        return
    updated = _changed(
        store.set_status(
            record,
            Status.REVOKED,
            by,
            reason,
            datetime.now(UTC),
            only_from=frozenset(Status) - {Status.REVOKED},
        ),
        record,
    )
    emit(updated.model_dump(mode="json"), as_json, f"{record.id} is revoked (it was {record.status.value})")


@memory.command("forget")
@click.option(
    "--lineage",
    "source",
    required=True,
    help="The source: evidence:sha256:<hex>, event:<key id>:<event id>, op:<op key>, or a record id.",
)
@operator_option
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
@json_option
@click.pass_obj
def memory_forget(settings: Settings, source: str, by: str, dry_run: bool, as_json: bool) -> None:
    """Delete every record that came from SOURCE, and every record derived from one of them,
    transitively; for an evidence document, the document too, in every tenant that holds it, and
    every task's excerpt of it. Nothing else is deleted. Each forget is kept on wk:mem:forgotten."""
    if not (re.fullmatch(SOURCE, source) or re.fullmatch(RECORD_ID, source)):
        raise click.BadParameter(
            f"{source!r} names no source: evidence:sha256:<hex>, event:<key id>:<event id>, "
            "op:<op key>, deadline, or a record id m-<24 hex>",
            param_hint="--lineage",
        )
    client = Client(settings)
    operator(client, by)
    store = MemoryStore(client.admin)
    gone = derived(list(store.every()), source)
    documents = _documents(Evidence(client.admin), source, dry_run)
    if not dry_run:
        store.delete(gone)
    ids = sorted(r.id for r in gone)
    excerpts = [f"{task_id} {name}" for d in documents for task_id, name in d["excerpts"]]
    if not dry_run:
        tenants = [d["tenant"] for d in documents if d["document"]]
        store.forgotten(
            source, by, ids, [*(f"document of {t}" for t in tenants), *excerpts], datetime.now(UTC)
        )
    doc = {"source": source, "dry_run": dry_run, "by": by, "deleted": {"memory": ids, "evidence": documents}}
    verb = "would delete" if dry_run else "deleted"
    said = [
        f"{verb} {len(ids)} memory records, {sum(d['document'] for d in documents)} documents and "
        f"{len(excerpts)} excerpts from {source}",
        *ids,
        *(f"excerpt: {e}" for e in excerpts),
    ]
    emit(doc, as_json, "\n".join(said))


def _documents(evidence: Evidence, source: str, dry_run: bool) -> list[dict[str, Any]]:
    """For an evidence reference: in each tenant that holds it, whether the document was there and
    the (task, field) of each excerpt of it, deleted unless dry_run."""
    if not source.startswith(EVIDENCE_REF):
        return []
    out = []
    for tenant in evidence.tenants(source):
        gone = evidence.forget(tenant, source, dry_run=dry_run)
        out.append(
            {"tenant": tenant, "document": gone.document, "excerpts": [list(e) for e in gone.excerpts]}
        )
    return out


@memory.command("document")
@click.argument("ref", metavar="REF")
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True, help="Whose document.")
@json_option
@click.pass_obj
def memory_document(settings: Settings, ref: str, tenant: str, as_json: bool) -> None:
    """An evidence document again, whole, by its reference (evidence:sha256:<hex>, as a record's
    provenance or a task's evidence names it): its text, its source and when it was stored."""
    try:
        found = Evidence(Client(settings).admin).fetch(tenant, ref)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="REF") from None
    if found is None:
        raise click.ClickException(
            f"tenant {tenant} holds no document {ref}: it expired, was forgotten, or is another tenant's"
        )
    emit(
        found | {"ref": ref, "tenant": tenant},
        as_json,
        f"{ref} from {found['source']} at {found['at']}\n{found['text']}",
    )


def _keyring(settings: Settings, *, needed: bool) -> Keyring | None:
    """The sealing keyring that seals the status a command sets (D93). A release needs it (an
    unsealed record is never shown); a quarantine or a revoke without it leaves the record unsealed,
    which hides it all the same."""
    if not needed and not settings.keyring.is_file():
        return None
    try:
        return Keyring.load(settings.keyring)
    except KeyringError as exc:
        raise click.ClickException(f"{exc}: a released record is sealed with it (WAKEFUL_KEYRING)") from None


def _found(store: MemoryStore, record_id: str) -> MemoryRecord:
    if not re.fullmatch(RECORD_ID, record_id):
        raise click.BadParameter(
            f"{record_id!r} is no record id (m-<24 hex>, as `wakeful memory list` shows)"
        )
    for record in store.every():
        if record.id == record_id:
            return record
    raise click.ClickException(
        f"no memory record {record_id}: `wakeful memory list` shows the ones there are"
    )


def _changed(updated: MemoryRecord | None, record: MemoryRecord) -> MemoryRecord:
    if updated is None:
        raise click.ClickException(
            f"{record.id} was forgotten or moved by another operator meanwhile: nothing changed; "
            f"`wakeful memory show {record.id}` shows where it stands"
        )
    return updated
