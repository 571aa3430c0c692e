"""How many examples a property test draws: a share of them in every run, all of them when asked (issue 27).

Each property test names its thorough count (`examples(500)`). The test command (`scripts/test`, which CI runs)
draws two fifths of each count: every property runs on every run, over a few dozen to two hundred examples,
with hypothesis's own shrinking and the same strategies; what it gives up is the rarest inputs of the long
tail. `LANES_HYPOTHESIS_PROFILE=thorough scripts/test` draws them all: what a developer runs before changing a
parser, a policy or the engines' flag tables.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE_ENV = "LANES_HYPOTHESIS_PROFILE"
THOROUGH = 100
"""The thorough profile's `max_examples` (hypothesis's own default): the unit the other profiles' counts are of."""

settings.register_profile("thorough", max_examples=THOROUGH)
settings.register_profile("quick", max_examples=THOROUGH * 2 // 5)


def load() -> str:
    """Load the profile `LANES_HYPOTHESIS_PROFILE` names (quick unless it says otherwise); its name."""
    name = os.environ.get(PROFILE_ENV) or "quick"
    settings.load_profile(name)
    return name


def examples(thorough: int) -> int:
    """The examples a test whose thorough run draws `thorough` draws under the loaded profile (at least 20)."""
    return max(min(thorough, 20), thorough * settings().max_examples // THOROUGH)
