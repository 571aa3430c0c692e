"""The journal's tables: created on first open, and given the columns later releases added.

A journal written by an older lanes opens as it is; columns are only ever added, so an older lanes
can still read a newer journal's tables.
"""

from __future__ import annotations

import sqlite_utils

from reconciler.store.lanerecord import ADDED_APPLY_COLUMNS, ADDED_LANE_COLUMNS


def migrate(db: sqlite_utils.Database) -> None:
    if "journal" not in db.table_names():
        db.table("journal").create(
            {
                "id": int,
                "run": str,
                "lane": str,
                "commit": str,
                "seq": int,
                "kind": str,
                "detail": str,
                "state": str,
                "started": float,
                "finished": float,
                "error": str,
            },
            pk="id",
        )
        db.table("journal").create_index(["lane", "state"])
    if "lanes" not in db.table_names():
        db.table("lanes").create(
            {
                "name": str,
                "desired": str,
                "health": str,
                "desired_commit": str,
                "applied_commit": str,
                "hosts": str,
                "fingerprint": str,
                "last_error": str,
                "failed_fingerprint": str,
                "healthy_specs": str,
                "healthy_commit": str,
                "updated": float,
                "timings": str,
                **ADDED_LANE_COLUMNS,
            },
            pk="name",
        )
    else:
        have = db.table("lanes").columns_dict
        for column, kind in ADDED_LANE_COLUMNS.items():
            if column not in have:
                db.table("lanes").add_column(column, kind)
    if "commits" not in db.table_names():
        db.table("commits").create(
            {"sha": str, "outcome": str, "detail": str, "time": float},
            pk="sha",
        )
    if "applies" not in db.table_names():
        db.table("applies").create(
            {
                "id": int,
                "run": str,
                "lane": str,
                "commit": str,
                "fingerprint": str,
                "result": str,
                "error": str,
                "started": float,
                "finished": float,
                "timings": str,
                "logs": str,
            },
            pk="id",
        )
        db.table("applies").create_index(["lane", "commit"])
    have_applies = db.table("applies").columns_dict
    for column, kind in ADDED_APPLY_COLUMNS.items():
        if column not in have_applies:
            db.table("applies").add_column(column, kind)
