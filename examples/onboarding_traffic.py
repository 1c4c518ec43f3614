"""The onboarding app's load for `wakeful bench`, `wakeful chaos` and the crash suite.

Each task is created with a supplier document, then the e-signature provider's `signature.completed`,
then the verifier's `bank_details.verified` with a valid IBAN in the supplier's name. On the second
path (10% under chaos) the supplier register is told, through its fault hook, to refuse the first
payment for good, so the registration is compensated (undone) and the task parked for a person. Its
effects are the register's records: a registration, a payment, or an undo (`UNDO:<op key>`).
"""

from __future__ import annotations

import random

import redis

from wakeful.bench.traffic import Effect, Plan, Send, stream_after, stream_mark
from wakeful.examples import onboarding as onb
from wakeful.examples import suppliers_keys
from wakeful.examples.onboarding_rules import checksum
from wakeful.examples.suppliers import REFUSE, Removal, decode
from wakeful.operate.dev_signers import REQUESTER
from wakeful.schemas import events

NAMES = ("Acme Tools", "Borealis Metals", "Cobalt Freight", "Delta Fasteners", "Ember Textiles")
FORMS = ("GmbH", "AG", "KG", "SE")


def iban(rng: random.Random) -> str:
    """A German IBAN with a random account and the check digits ISO 13616 gives it."""
    bban = "".join(str(rng.randrange(10)) for _ in range(18))
    return f"DE{98 - checksum(f'DE00{bban}'):02d}{bban}"


class OnboardingTraffic:
    share = 0.1
    second_path = "with a first payment refused, then compensated"

    def plan(self, task_id: str, rng: random.Random, second: bool) -> Plan:
        name = f"{rng.choice(NAMES)} {rng.randrange(1000)} {rng.choice(FORMS)}"
        tag = f"{rng.getrandbits(48):012x}"
        create = {
            "legal_name": name,
            "country": "DE",
            "amount": rng.randint(1_000, 500_000),
            "currency": "EUR",
            "documents": {"w9": f"Supplier form for {name}. Tax id DE{rng.randrange(10**9):09d}."},
        }
        signed = {"envelope_id": f"env-{tag}", "document": f"Master services agreement, signed by {name}."}
        verified = {"account": iban(rng), "holder": name, "verification_id": f"ver-{tag}"}
        sends = [
            Send(REQUESTER, events.CREATE, create),
            Send(onb.ESIGN.removeprefix("principal:"), onb.SIGNED, signed),
            Send(onb.VERIFIER.removeprefix("principal:"), onb.VERIFIED, verified),
        ]
        if not second:
            return Plan(sends, settles="closed", effects=2)  # registered, then paid

        def refuse_payment(admin: redis.Redis) -> None:
            admin.hset(suppliers_keys.faults_key(task_id), "schedule", REFUSE)

        return Plan(sends, settles="needs_review", effects=2, arrange=refuse_payment)  # registered, undone

    def mark(self, admin: redis.Redis) -> str:
        return stream_mark(admin, suppliers_keys.LOG)

    def effects(self, admin: redis.Redis, after: str) -> tuple[list[Effect], str]:
        raw, cursor = stream_after(admin, suppliers_keys.LOG, after)
        found = []
        for outcome in (decode(r) for r in raw):
            op_key = f"UNDO:{outcome.op_key}" if isinstance(outcome, Removal) else outcome.op_key
            found.append(Effect(outcome.task_id, op_key, outcome.at))
        return found, cursor


traffic = OnboardingTraffic()
