"""How many examples a property test draws: all of them in a developer's run, a share of them in CI (issue 27).

Each property test names its thorough count (`examples(500)`): what `scripts/test` draws by default, and what a
developer runs before changing a parser, a policy or the engines' flag tables. CI (`.ci/run`) sets
`LANES_HYPOTHESIS_PROFILE=ci`, which draws two fifths of each count: every property still runs on every CI run,
over a few dozen to two hundred examples, with hypothesis's own shrinking and the same strategies; what CI gives
up is the rarest inputs of the long tail, which the thorough runs keep looking for.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE_ENV = "LANES_HYPOTHESIS_PROFILE"
THOROUGH = 100
"""The thorough profile's `max_examples` (hypothesis's own default): the unit the other profiles' counts are of."""

settings.register_profile("thorough", max_examples=THOROUGH)
settings.register_profile("ci", max_examples=THOROUGH * 2 // 5)


def load() -> str:
    """Load the profile `LANES_HYPOTHESIS_PROFILE` names (thorough unless it says otherwise); its name."""
    name = os.environ.get(PROFILE_ENV) or "thorough"
    settings.load_profile(name)
    return name


def examples(thorough: int) -> int:
    """The examples a test whose thorough run draws `thorough` draws under the loaded profile (at least 20)."""
    return max(min(thorough, 20), thorough * settings().max_examples // THOROUGH)
