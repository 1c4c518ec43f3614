"""`wakeful release propose | sign | show` (D121): a release becomes a proposal, its owners sign it,
and a gate or executor of an app that declares owners starts only once they have
(consumers/kafka/releases.py). The proposal and every sign-off are kept in the authority keyspace
(state/releases.py), so the sealed copy on wakeful.authority carries them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import orjson

from wakeful.authority import signoffs
from wakeful.cli.app_option import checked_app
from wakeful.cli.output import emit
from wakeful.cli.release_cmds import release, report
from wakeful.consumers.kafka import releases as deploy_check
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.producers.keys import load_signer, local_signer
from wakeful.state.releases import Releases
from wakeful.workflow import release_digest

APP = click.option("--app", "spec", required=True, metavar="MODULE:ATTR", help="The app of the release.")


@release.command("propose")
@APP
@click.option("--by", required=True, help="Who proposes it (kept with the proposal).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def propose(settings: Settings, spec: str, by: str, as_json: bool) -> None:
    """Keep the release of SPEC as a proposal its owners can sign: its digest, what it covers and
    what `release check` says of it (what changes, how each sleeping task fares, the tools'
    wording diff). A release already proposed keeps its first record."""
    app, data, *_ = report(settings, spec)
    digest = data["release"]
    kept = {**data, "tasks": len(data["tasks"]), "proposed_by": by, "proposed_at": _now()}
    first = Releases(Client(settings).admin, app.name).propose(digest, orjson.dumps(kept))
    said = f"release {digest[:12]} of app {app.name} {'proposed' if first else 'was already proposed'}"
    if app.owners:
        said += f"; it needs a sign-off from each of: {', '.join(sorted(app.owners))}"
    emit({"release": digest, "app": app.name, "first": first, "owners": dict(app.owners)}, as_json, said)
    if data["refused_at_deploy"]:
        raise click.ClickException(f"it will not start as it is: {'; '.join(data['refused_at_deploy'])}")


@release.command("sign")
@APP
@click.option("--role", required=True, help="The owner role you sign in (the app's `owners`).")
@click.option("--as", "principal", required=True, help="Who you are: a principal holding --role.")
@click.option("--key", "key_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Your Ed25519 signing key (default: this machine's keystore).")  # fmt: skip
@click.option("--note", default="", help="Why you sign: kept beside the sign-off.")
@click.option("--change", "change", default=None, metavar="DIGEST",
              help="Sign this change of the app's authority instead (D124): a command's digest.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def sign(
    settings: Settings, spec: str, role: str, principal: str, key_file: Path | None, note: str,
    change: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Sign the release of SPEC (or, with --change, a change of its authority a command proposed)
    as PRINCIPAL in ROLE, with PRINCIPAL's registered key. The release is proposed first if it was
    not (the stored tasks are read for its report only then). Refused, with nothing written, when
    PRINCIPAL holds no ROLE, the key is not theirs, or no command proposed the change."""
    app, client = checked_app(spec), Client(settings)
    digest = change or release_digest.digest(app)
    if change is not None and Releases(client.admin, app.name).proposal(change) is None:
        raise ConfigError(
            "--change", f"app {app.name} has no change {change[:12]} proposed: run the command first"
        )
    if role not in app.owners:
        raise ConfigError("--role", f"app {app.name} has no owner role {role!r} (its roles: "
                          f"{', '.join(sorted(app.owners)) or 'none: it declares no owners'})")  # fmt: skip
    signer = load_signer(f"key-{principal}", key_file) if key_file else local_signer(settings, principal)
    made = signoffs.sign(
        signer, app.name, digest, role=role, principal=principal, now=datetime.now(UTC), note=note
    )
    if why := signoffs.invalid(made, app.owners, client.authority.snapshot(with_signers=True)):
        raise ConfigError("--as", f"{why}: nothing was signed")
    stored = Releases(client.admin, app.name)
    if change is not None:
        stored.sign(digest, role, principal, made.encode())
        return _signed_change(client, app, digest, role, principal, as_json)
    if stored.proposal(digest) is None:
        _, data, *_ = report(settings, spec)
        kept = {**data, "tasks": len(data["tasks"]), "proposed_by": principal, "proposed_at": _now()}
        stored.propose(digest, orjson.dumps(kept))
    stored.sign(digest, role, principal, made.encode())
    _, missing = deploy_check.problems(client.admin, app)
    said = f"{principal} signed release {digest[:12]} of app {app.name} as {role}"
    said += f"; still: {'; '.join(missing)}" if missing else "; it may deploy"
    emit({"release": digest, "role": role, "principal": principal, "missing": missing}, as_json, said)


def _signed_change(client: Client, app: Any, digest: str, role: str, principal: str, as_json: bool) -> None:
    _, missing = deploy_check.signed(client.admin, app.name, digest, app.owners)
    said = f"{principal} signed change {digest[:12]} of app {app.name} as {role}"
    said += f"; still: {'; '.join(missing)}" if missing else "; run the command again to apply it"
    emit({"change": digest, "role": role, "principal": principal, "missing": missing}, as_json, said)


@release.command("show")
@APP
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def show(settings: Settings, spec: str, as_json: bool) -> None:
    """The release SPEC is, who proposed it, each sign-off and whether it counts, and whether a
    gate or executor of it would start."""
    app, client = checked_app(spec), Client(settings)
    digest, missing = deploy_check.problems(client.admin, app)
    stored = Releases(client.admin, app.name)
    raw = stored.proposal(digest)
    proposal = orjson.loads(raw) if raw else None
    auth = client.authority.snapshot(with_signers=True)
    signed: list[dict[str, Any]] = []
    for each in stored.signoffs(digest, app.owners):
        found = signoffs.decode(each)
        if isinstance(found, str):
            signed.append({"error": found})
            continue
        why = signoffs.invalid(found, app.owners, auth)
        signed.append(
            {"role": found.role, "principal": found.principal, "key": found.key_id, "at": found.signed_at}
            | {"note": found.note, "counts": why is None, "why_not": why}
        )
    kept = proposal or {}
    doc = {
        "app": app.name,
        "release": digest,
        "owners": {r: list(w) for r, w in app.owners.items()},
        "proposed_by": kept.get("proposed_by"),
        "proposed_at": kept.get("proposed_at"),
        "signoffs": signed,
        "deployable": not missing,
        "missing": missing,
    }
    lines = [f"release {digest} of app {app.name}"]
    lines.append(
        f"  proposed by {doc['proposed_by']} at {doc['proposed_at']}" if proposal else "  not proposed"
    )
    for s in signed:
        lines.append(
            f"  {s.get('role')}: {s.get('principal')} at {s.get('at')}"
            + ("" if s.get("counts") else f" (does not count: {s.get('why_not') or s.get('error')})")
        )
    if not app.owners:
        lines.append("  the app declares no owners: it deploys without sign-offs")
    else:
        lines.append("  may deploy" if not missing else f"  may not deploy: {'; '.join(missing)}")
    emit(doc, as_json, "\n".join(lines))


def _now() -> str:
    return datetime.now(UTC).isoformat()
