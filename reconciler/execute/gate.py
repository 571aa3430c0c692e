"""The readiness gate of a lane transaction: the head's stages, with every rank watched meanwhile.

`wait_ready` walks the head's stages (port, /health, /v1/models, a token). While it waits, every
rank's container is looked at each `watch_interval_s`: a rank that exits ends the wait at once (the
engine cannot become ready). A rank whose host stops answering twice in a row ends it too, but as a
host fault, which is transient: the spec is not blamed for a host that rebooted or lost its link.
"""

from __future__ import annotations

import asyncio
import contextlib
import re

from reconciler.engines import ContainerSpec
from reconciler.engines.vllm import is_ray_head, ray_join_seconds
from reconciler.errors import HostFaultError, LanesError, NotReadyError, StepFailedError
from reconciler.execute.hostops import HostOps
from reconciler.execute.readiness import GateResult, wait_ready
from reconciler.plan.steps import WaitReady
from reconciler.spec.lane import Health

RUNNING_STATES = frozenset({"running", "created"})
RAY_GAVE_UP = re.compile(r"lanes: only \d+ of \d+ Ray nodes joined in \S+ s")
"""The sentence the Ray head's join check (engines.vllm.RAY_NODES_ALIVE) exits with when nodes are missing."""
RAY_JOIN_LOOK_S = 1.0
"""How often a Ray head's log is read for its join line until it appears (one `docker logs --tail` each)."""


def _gate_failed(message: str, host_faults: list[str]) -> StepFailedError:
    """The gate's failure, transient when what ended it was a host that stopped answering."""
    cause: LanesError = HostFaultError(message) if host_faults else NotReadyError(message)
    return StepFailedError.wrap("wait-ready", [cause], touched=True)


async def gate(
    ops: HostOps,
    step: WaitReady,
    health: Health,
    ranks: list[tuple[str, ContainerSpec]],
    timings: dict[str, float],
    t0: float,
    watch_interval_s: float,
) -> None:
    """Return when the lane serves; raise StepFailedError (touched) when it does not."""
    died = asyncio.Event()
    dead: list[str] = []
    host_faults: list[str] = []
    ray_head = ranks[0] if ranks and is_ray_head(ranks[0][1]) else None
    joined: list[float] = []

    async def watch() -> None:
        misses: dict[str, int] = {}
        while True:
            await asyncio.sleep(watch_interval_s)
            states = await asyncio.gather(*(ops.state(h, s.name) for h, s in ranks), return_exceptions=True)
            for (host, spec), state in zip(ranks, states, strict=True):
                if isinstance(state, str) and state not in RUNNING_STATES:
                    dead.append(f"{spec.name}@{host} is {state}")
                elif isinstance(state, LanesError):
                    # A rank whose host stops answering is as gone as a rank that exited.
                    misses[host] = misses.get(host, 0) + 1
                    if misses[host] >= 2:
                        dead.append(f"{spec.name}@{host} unreachable: {state}")
                        host_faults.append(host)
                else:
                    misses.pop(host, None)
            if dead:
                died.set()
                return

    async def follow_join(head: tuple[str, ContainerSpec]) -> None:
        # The join line is the head's last until `vllm serve` starts logging its load, which soon pushes it
        # out of any tail the gate could read at the end: it is looked for while it is there.
        while not joined:
            seen = ray_join_seconds(await ops.logs(head[0], head[1].name, tail=200))
            if seen is not None:
                joined.append(seen)
                return
            await asyncio.sleep(min(RAY_JOIN_LOOK_S, watch_interval_s))

    watcher = asyncio.create_task(watch())
    follower = asyncio.create_task(follow_join(ray_head)) if ray_head is not None else None
    try:
        result: GateResult = await wait_ready(
            ops.targets[step.host].address, step.port, step.served_model, health, started=t0, died=died
        )
    finally:
        for task in (watcher, follower):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, LanesError):
                    await task
    timings.update({f"to_{k}" if k != "startup_ttft" else k: v for k, v in result.timings.items()})
    if not result.ok:
        why = _why_not_ready(result, died.is_set(), dead, host_faults)
        if ranks and is_ray_head(ranks[0][1]):
            # A Ray head that stopped waiting for its nodes never ran `vllm serve`: its own words say why.
            gave_up = RAY_GAVE_UP.findall(await ops.logs(ranks[0][0], ranks[0][1].name, tail=50))
            why += f"; the Ray head gave up: {gave_up[-1]}" if gave_up else ""
        raise _gate_failed(f"readiness gate failed at stage '{result.stage}': {why}", host_faults)
    # The head can serve a token while another rank is already gone (its host rebooted or was cut
    # off between two looks of the watcher): the lane is ready only if every rank still runs.
    gone, unreachable = await ranks_gone(ops, ranks, watch_interval_s)
    if gone:
        why = f"{', '.join(dict.fromkeys(unreachable))} stopped answering" if unreachable else "not every rank runs"
        message = f"the head became ready but {why}: {'; '.join(gone)}"
        raise _gate_failed(message, unreachable)
    if ray_head is not None:
        # The head of a Ray lane waited for every node before `vllm serve`; its log said how long.
        if not joined:  # a gate shorter than one look: the line may still be in the tail
            seen = ray_join_seconds(await ops.logs(ray_head[0], ray_head[1].name, tail=200))
            joined.extend([] if seen is None else [seen])
        if joined:
            timings["ray_join"] = joined[0]


def _why_not_ready(result: GateResult, watcher_ended: bool, dead: list[str], host_faults: list[str]) -> str:
    """What ended a failed wait. When the rank watcher ended it, what it saw: a host that stopped answering
    (a fault of the host, transient) is said apart from a rank that exited (the engine's own doing)."""
    if watcher_ended:
        what = f"{', '.join(dict.fromkeys(host_faults))} stopped answering" if host_faults else "a rank exited"
        return f"{what} while waiting for {result.stage} ({'; '.join(dead)})"
    return f"{result.error}" + (f" ({'; '.join(dead)})" if dead else "")


async def ranks_gone(
    ops: HostOps, ranks: list[tuple[str, ContainerSpec]], watch_interval_s: float
) -> tuple[list[str], list[str]]:
    """Ranks that are not running, and the hosts among them that did not answer (asked twice)."""
    gone: list[str] = []
    unreachable: list[str] = []
    pending = list(ranks)
    for attempt in (1, 2):
        states = await asyncio.gather(*(ops.state(h, s.name) for h, s in pending), return_exceptions=True)
        retry: list[tuple[str, ContainerSpec]] = []
        for (host, spec), state in zip(pending, states, strict=True):
            if isinstance(state, LanesError):
                if attempt == 1:
                    retry.append((host, spec))
                else:
                    gone.append(f"{spec.name}@{host} unreachable: {state}")
                    unreachable.append(host)
            elif isinstance(state, BaseException):
                raise state
            elif state not in RUNNING_STATES:
                gone.append(f"{spec.name}@{host} is {state}")
        if not retry:
            break
        pending = retry
        await asyncio.sleep(watch_interval_s)
    return gone, unreachable
