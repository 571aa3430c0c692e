"""The daemon's journal pruning: at start, then every `[retention] prune_interval_s` (a day by default).

What is kept and why is in `reconciler.store.retention`. A prune that fails (the disk, a locked file)
is logged and tried again at the next interval; it never stops the daemon.
"""

from __future__ import annotations

import sqlite3

import structlog

from reconciler.daemon.config import RetentionSettings
from reconciler.store.journal import Store
from reconciler.store.retention import Pruned, prune

log = structlog.get_logger("lanes.daemon")


def prune_journal(store: Store, settings: RetentionSettings) -> Pruned | None:
    """Prune once; what was deleted (or why nothing was), None when sqlite refused."""
    try:
        pruned = prune(store, settings.policy())
    except sqlite3.Error as exc:
        log.warning("journal.prune_failed", error=str(exc))
        return None
    if pruned.skipped:
        log.info("journal.prune_skipped", reason=pruned.skipped)
    else:
        log.info("journal.pruned", journal=pruned.journal, applies=pruned.applies, commits=pruned.commits)
    return pruned
