"""The one rule of the daemon: nothing acts on a commit the decider has not verified.

Every path that loads a commit to act on it (the reconcile cycle, the base of a proposal branch, the lane
a trial runs on spare hosts) asks the decider through this door: `act_on(sha)` checks the commit as the
head was checked (signature, no rewind of the applied history) and only then loads it; `trusted` is the
last commit verified and decided, the only base proposals and trials start from.
"""

from __future__ import annotations

from typing import Protocol

from reconciler.errors import PermanentError
from reconciler.source.loadcommit import LoadedCommit


class UnverifiedCommitError(PermanentError):
    """A commit the decider did not verify was about to be acted on."""


class Gate(Protocol):
    @property
    def trusted(self) -> str | None:
        """The last commit the decider verified and decided, or None before the first."""
        ...

    def act_on(self, sha: str) -> LoadedCommit:
        """`sha`'s state and policies, once it passes the decider's checks; UnverifiedCommitError if not."""
        ...
