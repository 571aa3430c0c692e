"""`lanes allow-rewind COMMIT --reason ...`: let the daemon apply a head that rewinds the branch.

With signed commits on, the daemon refuses a head that does not descend from the last commit it applied
(a force-push of an older signed commit is a replay). When the rewind is wanted, an operator says so
here; who and why are recorded in the daemon's journal, and the daemon applies the head at its next
cycle (its resync, or at once on `systemctl reload lanes-reconciler`).
"""

from __future__ import annotations

import getpass
import json
import os
from pathlib import Path
from typing import Annotated

import typer

from reconciler.cli.common import handle_errors
from reconciler.cli.paths import DEFAULT_DB
from reconciler.store.journal import Store
from reconciler.store.trust import allow_rewind


def _who() -> str:
    user = os.environ.get("SUDO_USER") or getpass.getuser()
    return f"{user}@{os.uname().nodename}"


@handle_errors
def allow_rewind_cmd(
    commit: Annotated[str, typer.Argument(help="the full id of the refused head, as the refusal names it")],
    reason: Annotated[str, typer.Option("--reason", help="why this rewind is wanted (recorded)")],
    db: Annotated[Path, typer.Option("--db", envvar="LANES_DB", help="the daemon's sqlite journal")] = DEFAULT_DB,
    by: Annotated[str | None, typer.Option("--by", help="who allows it (default: user@host)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Allow a head that does not descend from the last applied commit (a force-push) to be applied."""
    store = Store(db)
    try:
        row = allow_rewind(store, commit, by=by or _who(), reason=reason)
    finally:
        store.close()
    if as_json:
        print(json.dumps({"ok": True, "exit_code": 0, **row}))
    else:
        print(f"{row['sha'][:12]}: rewind allowed by {row['by']}: {row['reason']}")
        print("the daemon applies it at its next cycle (now: systemctl reload lanes-reconciler)")
