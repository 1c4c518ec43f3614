"""The tutorial's app (wakeful.examples.tutorial) with approvals good for two seconds
(Workflow.approval_valid_for), for tests/test_approval_expiry_stack.py."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from wakeful.examples import tutorial

VALID_FOR = timedelta(seconds=2)
app = dataclasses.replace(
    tutorial.app, workflows=[dataclasses.replace(tutorial.rooms, approval_valid_for=VALID_FOR)]
)
