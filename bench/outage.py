"""`wakeful chaos --outage TARGETS --for DURATION`: the outage drill.

It starts a fleet and the HTTP door, takes TARGETS down (role names, `all` for every role, `redis`
or `kafka`), and while they are down sends N tasks' traffic (the app's own, bench/traffic.py:
creates and, on the second path, approvals), every other task through the door (`POST /v1/events`)
and the rest straight to Kafka, spread over the outage. Then it brings the targets back, waits for
every task to settle and reports, with chaos's checks (bench/chaos.py `check`):

- dead_lettered: letters on wakeful.dlq naming one of the drill's tasks (lateness is ours: none);
- lost: accepted events with no receipt or not in their task's inbox (each applied once);
- duplicated: op keys with more than one effect at the app's downstream;
- stranded: open tasks with nothing to wake them (no wait with a registered deadline).

A sender whose send fails (the door answers 503 while Redis or Kafka is down, the broker does not
acknowledge) signs its event again and sends it again, as an upstream system would, until the
targets are back and a minute more. With a short WAKEFUL_EVENT_MAX_AGE the outage is many times the
max age: what the door took is judged as it was when it reached Kafka (D84).
"""

from __future__ import annotations

import functools
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from wakeful.bench import chaos
from wakeful.bench.traffic import Planned, load_traffic, plan_tasks, warm_up
from wakeful.consumers.kafka.supervisor import INGRESS, ROLES, spawn
from wakeful.core.errors import ConfigError, WakefulError
from wakeful.core.process import Say, wait_until
from wakeful.core.settings import Settings
from wakeful.devstack import kafka, redis_server, stack
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.operate.dlq.read import DlqReader
from wakeful.producers.signing import sign_event
from wakeful.schemas.events import SignedEvent
from wakeful.sdk.app import ENV, load_app

SERVERS = ("redis", "kafka")
REPEAT = "duplicate event "  # inbound's reason for a second copy of an event (consumers/inbound/main.py)
RETRY_S = 0.5  # between a failed send and the next
SENDERS = 16  # upstream systems sending at once: one waiting on its retries holds up no other
GRACE_S = 60.0  # how long after the targets are back a sender keeps trying
UP_ATTEMPTS = 3  # `dev up` runs to bring the servers back
JSON = {"Content-Type": "application/json"}


def targets_of(names: Sequence[str]) -> tuple[str, ...]:
    """The roles and servers an --outage names (`all`: every role); ConfigError naming the unknown."""
    wanted = [n.strip() for name in names for n in name.split(",") if n.strip()]
    unknown = sorted(set(wanted) - {*ROLES, *SERVERS, "all"})
    if unknown or not wanted:
        known = ", ".join([*ROLES, "all", *SERVERS])
        raise ConfigError(
            "--outage", f"unknown target(s) {', '.join(unknown) or '(none)'}: name any of {known}"
        )
    expanded = [r for n in wanted for r in (ROLES if n == "all" else (n,))]
    return tuple(dict.fromkeys(expanded))


def duration(text: str) -> float:
    """Seconds from `30`, `30s`, `5m` or `1h`; ConfigError naming --for otherwise."""
    units = {"s": 1, "m": 60, "h": 3600}
    raw = text.strip().lower()
    number, unit = (raw[:-1], raw[-1]) if raw[-1:] in units else (raw, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 7 * 24 * 3600:
        raise ConfigError("--for", f"{text!r} is no duration: say 30s, 5m or 1h (at most a week)")
    return seconds


def run(
    settings: Settings,
    tasks: int,
    targets: Sequence[str],
    seconds: float,
    *,
    seed: int | None,
    say: Say,
    door_port: int,
    replicas: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    traffic = load_traffic(load_app(settings.app))
    rng = random.Random(seed)
    stack.up(settings, say)
    client, reader = Client(settings), DlqReader(settings)
    client.reset_authority()
    env = {**os.environ, "WAKEFUL_MODEL": "rules"} | ({ENV: settings.app} if settings.app else {})
    fleet = Fleet(env, replicas=replicas).start()
    door_env = env | {"WAKEFUL_INGRESS_RATE": "1000000000", "WAKEFUL_INGRESS_BURST": "1000000000"}
    door_log = (fleet.dir / "ingress.log").open("ab")
    door = spawn(INGRESS, [], env=door_env, output=door_log, ingress_port=door_port)
    url = f"http://127.0.0.1:{door_port}"
    started = time.monotonic()
    try:
        if not wait_until(lambda: door.poll() is not None or _answers(url), 60, interval=0.1) or door.poll():
            raise WakefulError(f"the door did not start on port {door_port}: see {fleet.dir / 'ingress.log'}")
        warm_up(client, traffic)
        mark, letters_from = traffic.mark(client.admin), reader.ends()
        plans = plan_tasks(client, traffic, [rng.random() < traffic.share for _ in range(tasks)], rng, "o")
        say(f"taking {', '.join(targets)} down for {seconds:.0f} s while {tasks} tasks arrive ...")
        sent, retried = _through_outage(
            settings,
            fleet,
            targets,
            seconds,
            send=lambda: _send_all(client, url, plans, seconds, started=time.monotonic(), say=say),
            say=say,
        )
        say("waiting for every task to settle ...")
        checked = chaos.check(client, traffic, plans, mark, timeout=max(180.0, tasks / 5))
        ours = {p.task_id for p in plans}
        letters = [x.letter for x in reader.since(letters_from) if x.letter and x.letter.task_id in ours]
        # A second copy of an event its sender sent again (the broker did not answer the first, which
        # landed after all) is the door's replay guard at work, not accepted work refused.
        repeats = [d for d in letters if d.reason.startswith(REPEAT) and _event_of(d.reason) in retried]
        dead = [f"{d.task_id}: {d.reason}" for d in letters if d not in repeats]
    finally:
        door.terminate()
        door.wait(timeout=20)
        door_log.close()
        fleet.stop()
        client.close()
        reader.close()
    report = {
        "app": client.app.name,
        "outage": list(targets),
        "outage_s": seconds,
        "sent_through_door": sent,
        "dead_lettered": len(dead),
        "dead_letter_examples": dead[:5],
        "repeats": len(repeats),
        "lost": checked["misapplied_events"],
        "duplicated": checked["duplicate_effects"],
        "stranded": checked["lost"],
        "seconds": round(time.monotonic() - started, 1),
    } | {k: checked[k] for k in ("tasks", "events", "stages", "effects", "off_plan", "off_plan_examples")}
    report["ok"] = not (
        report["dead_lettered"] or report["lost"] or report["duplicated"] or report["stranded"]
    )
    return report


def _through_outage(
    settings: Settings,
    fleet: Fleet,
    targets: Sequence[str],
    seconds: float,
    *,
    send: Callable[[], tuple[int, set[str]]],
    say: Say,
) -> tuple[int, set[str]]:
    """Take `targets` down, `send` while they are down, and bring them back `seconds` later,
    whatever the senders are doing then; what `send` returned, once the targets are back."""
    _down(settings, fleet, targets)
    failed: list[BaseException] = []

    def restore() -> None:
        try:
            _up(settings, fleet, targets, say)
        except BaseException as exc:  # told after the senders stop: this thread has nobody to tell
            failed.append(exc)

    back = threading.Timer(seconds, restore)
    back.start()
    try:
        sent = send()
    finally:
        back.join()  # the senders keep trying until the targets are back
    if failed:
        raise WakefulError(f"could not bring {', '.join(targets)} back: {failed[0]!r}") from failed[0]
    return sent


def _down(settings: Settings, fleet: Fleet, targets: Sequence[str]) -> None:
    for target in targets:
        if target == "redis":
            redis_server.stop(settings)
        elif target == "kafka":
            kafka.stop(settings)
        else:
            for member in fleet.members_of(target):
                fleet.stop_role(member)


def _up(settings: Settings, fleet: Fleet, targets: Sequence[str], say: Say) -> None:
    say(f"bringing {', '.join(targets)} back ...")
    if any(t in SERVERS for t in targets):
        _servers_up(settings, say)
    for target in targets:
        if target not in SERVERS:
            for member in fleet.members_of(target):
                fleet.start_role(member)


def _servers_up(settings: Settings, say: Say, attempts: int = UP_ATTEMPTS) -> None:
    """`dev up` until it gets through, as an operator runs it again: a broker that answers
    metadata may still time out the first admin calls (users, ACLs, topic configs) on a busy box."""
    for attempt in range(1, attempts + 1):
        try:
            stack.up(settings, say)
            return
        except Exception as exc:
            if attempt == attempts:
                raise
            say(f"dev up failed ({exc!r}); again ({attempt + 1} of {attempts}) ...")


def _send_all(
    client: Client, url: str, plans: list[Planned], seconds: float, *, started: float, say: Say
) -> tuple[int, set[str]]:
    """Each task's events in order, spread over `seconds`, SENDERS tasks at a time; every other task
    through the door. Each event is sent until it is taken (a fresh signature each try). Returns how
    many tasks went by the door, and the ids of the events sent more than once."""
    signer = functools.cache(client.signer)
    until = started + seconds + GRACE_S
    retried: set[str] = set()

    def send(k: int, planned: Planned, http: httpx.Client) -> None:
        time.sleep(max(0.0, started + seconds * k / max(1, len(plans)) - time.monotonic()))
        door = k % 2 == 0
        # In order within a task; what was taken is what the checks look for.
        planned.sent[:] = [
            _taken(client, http, e, signer, door, until=until, retried=retried) for e in planned.sent
        ]

    with httpx.Client(base_url=url, timeout=10) as http, ThreadPoolExecutor(SENDERS) as senders:
        for done in [senders.submit(send, k, p, http) for k, p in enumerate(plans)]:
            done.result()  # a sender's error is the drill's
    wait_until(lambda: time.monotonic() >= started + seconds, seconds + 1, interval=0.2)
    by_door = (len(plans) + 1) // 2
    say(f"sent {len(plans)} tasks' traffic ({by_door} through the door)")
    return by_door, retried


def _taken(
    client: Client,
    http: httpx.Client,
    event: SignedEvent,
    signer: Callable[[str], Any],
    door: bool,
    *,
    until: float,
    retried: set[str],
) -> SignedEvent:
    """Send `event` until the door answers 202 or the broker acknowledges it, signed afresh for each
    try (same event id), as an upstream system signs what it sends when it sends it; the version
    that was taken."""
    principal = event.key_id.removeprefix("key-")
    while True:
        attempt = sign_event(
            signer(principal),
            event.kind,
            event.payload,
            task_id=event.task_id,
            correlation_id=event.correlation_id,
            event_id=event.event_id,
        )
        try:
            if door:
                answer = http.post("/v1/events", content=attempt.encode(), headers=JSON)
                if answer.status_code == 202:
                    return attempt
                if answer.status_code < 500 and answer.status_code != 429:
                    raise WakefulError(
                        f"the door refused {attempt.event_id}: {answer.status_code} {answer.text[:200]}"
                    )
            else:
                # Once, waiting for the broker however long it is away: a send that timed out may
                # still land, and a copy signed again would then be a second, later event.
                client.publisher.publish(attempt, timeout=max(5.0, until - time.monotonic()))
                return attempt
        except (httpx.TransportError, WakefulError) as exc:
            if isinstance(exc, WakefulError) and "the door refused" in str(exc):
                raise
        if time.monotonic() > until:
            raise WakefulError(f"event {event.event_id} was never taken: are the targets back?")
        retried.add(event.event_id)
        time.sleep(RETRY_S)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v1/health", timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


def _event_of(reason: str) -> str:
    """The event id a duplicate's reason names ("duplicate event ID from key K")."""
    return reason.removeprefix(REPEAT).partition(" ")[0]


def render(r: dict[str, Any]) -> str:
    verdict = "OK" if r["ok"] else "FAILED"
    return "\n".join(
        [
            f"outage {verdict} ({r['app']}): {', '.join(r['outage'])} down for {r['outage_s']:.0f} s, "
            f"{r['tasks']} tasks ({r['sent_through_door']} through the door), {r['events']} events, "
            f"in {r['seconds']} s",
            f"stages         : {r['stages']}",
            f"dead-lettered  : {r['dead_lettered']} {r['dead_letter_examples'] or ''}",
            f"senders' repeats refused: {r['repeats']} (a second copy of an event applied once)",
            f"lost events    : {r['lost']}",
            f"effects twice  : {r['duplicated']}",
            f"stranded tasks : {r['stranded']}",
            f"off their plan : {r['off_plan']} {r['off_plan_examples'] or ''}",
        ]
    )
