"""The onboarding app with a second fact that is not high-impact, as an app of one's own would
declare it: `wakeful memory release --app memory_app:app` may make its records active."""

from __future__ import annotations

import dataclasses

from wakeful.examples.onboarding import app as onboarding
from wakeful.sdk import Fact

LANGUAGE, LEAD = "preferred_language", "principal:support-lead"

app = dataclasses.replace(onboarding, facts=[*onboarding.facts, Fact(LANGUAGE, verifiers=(LEAD,))])
