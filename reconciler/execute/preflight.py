"""Preflight: the pinned image's own parser judges a lane's arguments before its change stops anything.

A flag table judges exactly only the release it was read from (`engines/flagtable.py`); a nightly, a
fork or a branch build is only warned about, and the first word from its own parser used to be every
new rank exiting on "unrecognized arguments" after the old ranks were stopped. Here, for each lane the
plan would deploy, the head rank's engine arguments are parsed by the image itself on that rank's host
(`facts/preflight.py`: no GPU, no network, a memory cap, a time bound), once per (engine, image
digest, argv): the verdict is kept in the journal (`store/preflight.py`) and reused at every later
cycle. A refusal becomes a policy deny of that lane (`policy/preflight.py`), so the planner leaves the
lane as it runs; a run that judges nothing (the host did not answer, the image has no python3, the cap
killed it) is logged and the change goes ahead as before, its ranks' own parsers still the last word.

`lanes plan` (no apply) runs no container: it uses only the kept verdicts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Collection
from dataclasses import dataclass

import structlog

from reconciler.errors import LanesError
from reconciler.execute.hostops import HostOps
from reconciler.facts import docker
from reconciler.facts.preflight import SCRIPTS, container_name, preflight_argv, read_result
from reconciler.plan import Plan
from reconciler.policy import Verdict
from reconciler.policy.preflight import Refusal, head_key, with_refusals
from reconciler.spec.load import DesiredState
from reconciler.store import preflight as kept
from reconciler.store.journal import Store

log = structlog.get_logger("lanes.preflight")

PARSE_TIMEOUT_S = 180.0
"""Importing vLLM or SGLang (torch, their kernels' Python side) takes tens of seconds on a Spark."""
MAX_PARALLEL = 8


@dataclass(frozen=True)
class Candidate:
    """One lane's head rank as the preflight runs it."""

    lane: str
    engine: str
    host: str
    image: str
    digest: str
    argv: tuple[str, ...]
    key: str
    file: str


def candidates(desired: DesiredState, verdict: Verdict, plan: Plan) -> list[Candidate]:
    """The lanes the plan would deploy whose engine lanes can parse alone, by their head rank."""
    out = []
    for lane_plan in plan.lanes:
        lane = desired.lanes.get(lane_plan.lane)
        ranks = verdict.rendered.get(lane_plan.lane, ())
        if lane_plan.action != "deploy" or lane is None or lane.engine not in SCRIPTS or not ranks:
            continue
        host, spec = ranks[0]
        found = head_key(lane.engine, spec)
        if found is None:
            continue
        digest, argv, key = found
        out.append(Candidate(lane.name, lane.engine, host, spec.image, digest, argv, key, desired.lane_file(lane.name)))
    return out


async def _run(ops: HostOps, store: Store, c: Candidate) -> Refusal | None:
    name = container_name(c.lane, c.key)
    try:
        await ops.pull(c.host, c.image)  # the transaction would pull it too; a pull stops nothing
        result = await ops.call(c.host, preflight_argv(c.engine, c.image, name, c.argv), timeout=PARSE_TIMEOUT_S)
    except LanesError as exc:
        log.warning("preflight.unjudged", lane=c.lane, host=c.host, error=str(exc))
        with contextlib.suppress(LanesError):  # a parser still running after the bound is removed
            await ops.run(c.host, docker.rm_argv(name), check=False)
        return None
    verdict = read_result(result.exit_status if result.exit_status is not None else -1, result.stderr)
    if verdict.outcome == "unjudged":
        log.warning("preflight.unjudged", lane=c.lane, host=c.host, error=verdict.message)
        return None
    kept.record(
        store,
        key=c.key,
        engine=c.engine,
        digest=c.digest,
        image=c.image,
        argv=json.dumps(list(c.argv)),
        outcome=verdict.outcome,
        message=verdict.message,
        stderr=verdict.stderr,
        host=c.host,
        lane=c.lane,
    )
    log.info("preflight.judged", lane=c.lane, host=c.host, outcome=verdict.outcome, message=verdict.message)
    if verdict.outcome == "accepted":
        return None
    return Refusal(c.lane, c.host, c.image, verdict.message, c.file, cached=False)


def unjudged(
    store: Store, desired: DesiredState, verdict: Verdict, plan: Plan, hosts: Collection[str]
) -> list[Candidate]:
    """The lanes to deploy whose image has no kept verdict on their arguments yet, on a host we can reach."""
    return [c for c in candidates(desired, verdict, plan) if kept.cached(store, c.key) is None and c.host in hosts]


async def judge(ops: HostOps, store: Store, to_run: list[Candidate]) -> None:
    """Run the preflight of `to_run` (bounded in parallel), keeping each verdict: the daemon's background part."""
    bound = asyncio.Semaphore(MAX_PARALLEL)

    async def one(c: Candidate) -> None:
        async with bound:
            await _run(ops, store, c)

    await asyncio.gather(*(one(c) for c in to_run))


async def preflight(ops: HostOps | None, store: Store, desired: DesiredState, verdict: Verdict, plan: Plan) -> Verdict:
    """The verdict with a deny for every lane its image refused; `ops` None: kept verdicts only."""
    refusals: dict[str, Refusal] = {}
    to_run: list[Candidate] = []
    for c in candidates(desired, verdict, plan):
        seen = kept.cached(store, c.key)
        if seen is not None:
            if seen.outcome == "refused":
                refusals[c.lane] = Refusal(c.lane, seen.host, c.image, seen.message, c.file, cached=True)
        elif ops is not None and c.host in ops.targets:
            to_run.append(c)
    bound = asyncio.Semaphore(MAX_PARALLEL)

    async def one(c: Candidate) -> Refusal | None:
        async with bound:
            return await _run(ops, store, c)  # type: ignore[arg-type]  # to_run is empty without ops

    for found in await asyncio.gather(*(one(c) for c in to_run)):
        if found is not None:
            refusals[found.lane] = found
    return with_refusals(verdict, refusals)
