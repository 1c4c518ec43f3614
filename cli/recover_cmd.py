"""`wakeful recover` (rebuild a lost Redis from Kafka) and `wakeful authority backup` (D70)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click

from wakeful.cli.app_option import app_option
from wakeful.cli.output import emit, say
from wakeful.core.errors import WakefulError
from wakeful.core.settings import Settings


def journal(settings: Settings, *, always: bool = False) -> bool:
    """Put a sealed copy of authority on wakeful.authority if it changed since the last one. A
    failure is said, not raised: the command itself did its work, and the next one (or `wakeful
    authority backup`) publishes the copy."""
    from wakeful.core import secrets
    from wakeful.operate import reach
    from wakeful.operate.client import Client
    from wakeful.operate.recover import run as recovery

    if not secrets.exists(settings, "admin", "redis") or not reach.healthy(settings.redis_url):
        return always and _no_redis()  # without Redis no command changed authority
    try:
        client = Client(settings)
        try:
            return recovery.journal_authority(settings, client.admin, client.store.sealer, always=always)
        finally:
            client.close()
    except Exception as exc:  # best effort after the command's own work: said below
        if always:
            raise
        print(
            f"warning: authority changed but its copy is not on Kafka yet ({exc}); "
            "run `wakeful authority backup`",
            file=sys.stderr,
        )
        return False


def _no_redis() -> bool:
    raise WakefulError(
        "no Redis to copy authority from: start the stack (`wakeful dev up`) or set WAKEFUL_REDIS_URL"
    )


@click.command("backup")
@click.pass_obj
def backup(settings: Settings) -> None:
    """Publish a sealed copy of every authority key on wakeful.authority now (the commands that
    change authority do it themselves; `wakeful recover` puts the newest copy back)."""
    journal(settings, always=True)
    say("authority copy published on wakeful.authority")


@click.command("recover")
@app_option
@click.option("--force", is_flag=True, help="Run even though leases or live workers are found.")
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing: say whether the log could give back every task Redis holds now, and whether "
    "wakeful.wake and wakeful.proposals keep enough for a re-drive.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
def recover(settings: Settings, force: bool, check: bool, as_json: bool) -> None:
    """Rebuild wakeful's Redis keys from Kafka after Redis lost them: authority from its newest
    sealed copy, then every task's checkpoint, counters, inbox, action log, receipts, waits and
    timers from wakeful.log; then re-drives what Redis had applied and the log does not carry yet
    (the wakes the gate had read since, and the proposals a lost close carried out, published
    again). Stop the workers first. Safe to run twice."""
    from wakeful.operate import reach
    from wakeful.operate.client import Client
    from wakeful.operate.recover import run as recovery
    from wakeful.operate.recover import scan as recovery_scan

    reach.require_redis(settings)
    reach.require_kafka(settings)
    client = Client(settings)
    if check:
        try:
            rule = recovery.tombstone_rule(settings, client.app, datetime.now(UTC))
            on_log, missing, coverage = recovery_scan.uncovered(client.admin, settings, say, rule)
        finally:
            client.close()
        retention = _retention(settings, coverage)
        lines = [f"  {task}: {why}" for task, why in sorted(missing.items())[:50]]
        held = f"{on_log} tasks on the log"
        emit(
            {"tasks_on_log": on_log, "uncovered": missing, "retention": retention},
            as_json,
            "\n".join(
                [
                    f"{held}; the log could give back every task Redis holds"
                    if not missing
                    else f"{held}; {len(missing)} task(s) Redis holds it could not give back as they are:",
                    *lines,
                    *[f"  re-drive: {why}" for why in retention],
                ]
            ),
        )
        if missing:
            raise WakefulError(f"{len(missing)} task(s) are not covered by the log")
        if retention:
            raise WakefulError(f"a re-drive could not reach back far enough: {retention[0]}")
        return
    try:
        report = recovery.recover(settings, client.app, client.admin, client.store.sealer, say, force=force)
    finally:
        client.close()
    doc = report.as_dict()
    emit(doc, as_json, _human(doc))
    if report.done.failed:
        raise WakefulError(f"{len(report.done.failed)} task(s) could not be restored: see above")
    if report.redrive_plan.gone:
        raise WakefulError(
            f"{report.redrive_plan.gone[0].why()}: events applied in the relay's lag may be lost; raise "
            "the topic's retention.ms (docs/recovery.md)"
        )
    if report.unsigned or report.tombstones_refused:
        raise WakefulError(
            f"refused {report.unsigned} log message(s) the relay did not sign and "
            f"{report.tombstones_refused} tombstone(s) no purge could have made: see above. Nothing of "
            "them was folded and each task they named is kept as the rest of the log has it; find who "
            "wrote them (docs/security.md)"
        )


def _retention(settings: Settings, coverage: Any) -> list[str]:
    """Why a re-drive after a loss of Redis now could not reach back far enough (D87): a re-driven
    topic that keeps too little, or whose messages from the log's floor are deleted already."""
    from wakeful.consumers.kafka import retention as redrive_retention
    from wakeful.core import kafka_rights
    from wakeful.operate.recover import redrive

    kept = redrive_retention.kept(settings, kafka_rights.ADMIN)
    return redrive_retention.problems(kept) + [s.why() for s in redrive.plan(settings, coverage).gone]


def _human(doc: dict[str, Any]) -> str:
    lines = [
        f"read {doc['messages']} log messages: {doc['records']} records ({doc['duplicates']} repeated), "
        f"{doc['tasks_on_log']} tasks ({doc['purged']} more purged by retention: not restored)",
        f"restored {doc['restored']} tasks, woke {doc['woken']}; left {len(doc['left'])} "
        f"(Redis holds them at or past the log); could not restore {len(doc['failed'])}",
        f"authority: copy {doc['authority']['copy']}, {len(doc['authority']['written'])} keys written, "
        f"{len(doc['authority']['left'])} left",
    ]
    lines += [f"  not restored: {task}: {why}" for task, why in sorted(doc["failed"].items())]
    lines += [f"  skipped on the log: {why}" for why in doc["refused_messages"]]
    unsigned, tombs = doc["unsigned_messages"], doc["tombstones_refused"]
    if unsigned["count"] or tombs["count"]:
        lines.append(
            f"refused {unsigned['count']} log message(s) without the relay's log signature (not folded) and "
            f"{tombs['count']} tombstone(s) no purge could have made (their tasks kept)"
        )
    lines += [f"  not signed by the relay: {why}" for why in unsigned["named"]]
    if unsigned["before_the_log_was_signed"]:
        lines.append(
            f"  {unsigned['before_the_log_was_signed']} log message(s) written before the relay signed "
            "the log (D72), each before the first signed one of its partition: not folded"
        )
    lines += [f"  tombstone refused: {why}" for why in tombs["named"]]
    lines += [f"  index: {why}" for why in doc["index_skipped"]]
    lines += [f"  not on the log: {what}" for what in doc["not_on_the_log"]]
    redriven = doc["redrive"]
    lines.append(
        f"re-drive: wakes sent again on {len(redriven['wakes_published'])} partition(s), "
        f"{len(redriven['proposals_published'])} proposal(s) sent again, from {redriven['watermarks']} "
        f"relay watermark(s) and {redriven['changes_with_source']} change(s) naming their input"
    )
    lines += [f"  re-drive: {line}" for line in redriven["wakes_published"]]
    lines += [f"  re-drive: {why}" for why in redriven["deleted_by_retention"]]
    return "\n".join(lines)
