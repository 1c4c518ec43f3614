"""rollout_app's app with owners (D124): a rollout of its v2 starts, or widens, only once a business
and a security owner signed that change."""

from __future__ import annotations

from dataclasses import replace

from owned_app import OWNERS
from rollout_app import app as unowned

app = replace(unowned, owners=OWNERS)
