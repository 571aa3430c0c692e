"""The base every state and policy model shares: strict, frozen, documented.

Unknown fields are errors (a typo in a lane file must not be silently
ignored), and models are frozen so the pure core can hash and share them.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
"""Names of hosts, lanes and models: they become container names and labels."""

NAME_RE = re.compile(NAME_PATTERN)

Name = Annotated[str, Field(pattern=NAME_PATTERN, description="lower-case letters, digits, '.', '_', '-'")]


class StrictModel(BaseModel):
    """A frozen model that rejects unknown fields."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)
