"""The proposer: calls the model with the window and checks only the SHAPE of its answer.

It holds no Redis credential and no tool credential: it reads wakeful.proposals.request and
writes wakeful.proposals, nothing else. Whatever the model says is only a proposal; the executor
decides.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from confluent_kafka import Consumer, Message, Producer
from pydantic import ValidationError

from wakeful.consumers.models import Model, Proposal, make_model
from wakeful.consumers.runner import Runner, consumer_config, make_producer
from wakeful.core import topics
from wakeful.core.errors import DecodeError
from wakeful.core.log import Log
from wakeful.core.provenance import Forged, RoleKeys, load_keys
from wakeful.core.settings import Settings
from wakeful.schemas.events import Envelope


class Proposer:
    def __init__(self, model: Model, producer: Producer, log: Log, keys: RoleKeys) -> None:
        self.model = model
        self.role_keys = keys
        self.producer = producer
        self.log = log
        self.runner: Runner | None = None

    def handle(self, msg: Message) -> None:
        assert self.runner is not None
        sender = self.role_keys.sender(
            topics.PROPOSALS_REQUEST, msg.key() or b"", msg.value() or b"", msg.headers()
        )
        if isinstance(sender, Forged):  # the model never sees a window the gate did not build
            self.runner.dead_letter(msg, sender.reason)
            return
        try:
            request = Envelope.decode(msg.value() or b"")
            window = request.payload["window"]
            proposal = self.model.propose(window)
            # Shape only: a proposal that is not a Proposal never leaves this role.
            proposal = Proposal.model_validate_json(proposal.encode())
        except (DecodeError, KeyError, TypeError, ValidationError) as exc:
            self.runner.dead_letter(msg, f"proposal request or answer has the wrong shape: {exc!r}")
            return
        out = Envelope(
            message_id=f"proposal:{request.task_id}:{request.task_version}",
            task_id=request.task_id,
            task_version=request.task_version,
            kind="proposal",
            created_at=datetime.now(UTC),
            trace_id=request.trace_id,
            payload=proposal.model_dump(mode="json"),
            in_reply_to=request.message_id,
        )
        self.producer.produce(topics.PROPOSALS, key=request.task_id.encode(), value=out.encode())


def main(settings: Settings, stop: threading.Event) -> None:
    log = Log(role="proposer", model=settings.model)
    keys = load_keys(settings, "proposer")  # local files first: a missing one stops the role before any wait
    producer, failures = make_producer(settings, "proposer")
    proposer = Proposer(make_model(settings), producer, log, keys)
    runner = Runner(
        "proposer",
        topics.PROPOSALS_REQUEST,
        proposer.handle,
        Consumer(consumer_config(settings, "proposer", "wakeful-proposer")),
        producer,
        log=log,
        threads=settings.threads,
        failures=failures,
    )
    proposer.runner = runner
    log("role.start")
    runner.run(stop)
