"""One SSH round trip per host per cycle: every fact the planner needs.

Probing all hosts in parallel (bounded) with one request each keeps a no-op
resync of a large fleet close to the cost of one round trip; a host that
does not answer becomes an `unreachable` observation with the reason, not an
exception, so its lanes are reported and the others go on.

The probe program is installed on each host under its hash (`facts/probe_program.py`)
and each host keeps one long-lived session running it (`facts/probe_serve.py`): a probe
is one request line and one answer line on a channel that stays open, where a command
per probe cost a channel opened and closed. A host the program is missing from (first
contact, a new lanes version, a corrupt copy found when a session opens) is sent it in
the same cycle, a second round trip for that host only. `ProbeMemory` keeps, per host,
the digest of the facts last seen and those facts parsed (`facts/parse.py` `HeldFacts`):
a host whose facts did not change answers with that digest and its volatile figures,
and the held facts are reused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from reconciler.equalvalues import EqualValues
from reconciler.errors import HostUnreachableError, LanesError, PermanentError
from reconciler.facts.commands import installed_probe_argv, probe_session_argv
from reconciler.facts.observed import ObservedFleet, ObservedHost
from reconciler.facts.parse import HeldFacts, parse_probe_answer
from reconciler.facts.probe_program import NOT_INSTALLED_MESSAGE, PROBE_NOT_INSTALLED, program_path
from reconciler.facts.probe_script import PROBE_SCRIPT
from reconciler.facts.probe_serve import ANSWER_MAX_BYTES, REQUEST_MAX_BYTES, SESSION_MAX_IDLE_S, request_line
from reconciler.spec.load import DesiredState
from reconciler.transport.base import CommandResult, HostTarget, Session, Transport, checked


class ProbeMemory:
    """The facts each host last answered in whole, and their digest, kept across cycles.

    One per long-lived runner (the daemon's `CycleRunner`); a one-shot command starts empty and
    gets whole answers. Only hosts still in the fleet are kept (`retain`), and a host whose answer
    could not be parsed is forgotten, so its next probe asks for everything again.
    """

    def __init__(self) -> None:
        self._held: dict[str, HeldFacts] = {}
        self._seen: dict[str, tuple[float, ObservedHost]] = {}
        """Each host's last observation (the probe's answer, volatile figures included) and when it came
        (`time.monotonic()`): a commit's reaction plans with them for the hosts it does not probe."""
        self._equal = EqualValues(leaves=False)  # the parsed facts keep strings, not the answer's containers
        self._whole_since_renewal = 0
        self.installs = 0
        """Probe programs sent (first contact, a new version, a missing or corrupt copy): for tests and benches."""

    def get(self, host: str) -> HeldFacts | None:
        return self._held.get(host)

    def equal_values(self) -> EqualValues:
        """The table whole answers' stable facts are decoded into (`reconciler.equalvalues`): equal strings and
        leaf values one object across hosts (about 1.5 MB of RSS at 1,000 hosts). Renewed once twice as many
        whole answers came as hosts are held (the first probe of every host fills it, sharing across all), so
        it keeps no more than about three answers' worth of values a host; held facts keep the objects they use."""
        return self._equal

    def hold(self, host: str, facts: HeldFacts, observed: ObservedHost) -> None:
        if self._held.get(host) is not facts:  # a whole answer (an unchanged one returns the facts held)
            self._whole_since_renewal += 1
            if self._whole_since_renewal > max(64, 2 * len(self._held)):
                self._equal, self._whole_since_renewal = EqualValues(leaves=False), 0
        self._held[host] = facts
        self._seen[host] = (time.monotonic(), observed)

    def forget(self, host: str) -> None:
        self._held.pop(host, None)
        self._seen.pop(host, None)

    def retain(self, hosts: frozenset[str] | set[str]) -> None:
        for gone in set(self._held) - set(hosts):
            del self._held[gone]
        for gone in set(self._seen) - set(hosts):
            del self._seen[gone]

    def recent(self, host: str, max_age_s: float) -> ObservedHost | None:
        """The host's last observation if it came less than `max_age_s` ago (a host that did not answer its
        last probe has none: it is forgotten)."""
        seen = self._seen.get(host)
        if seen is None or time.monotonic() - seen[0] > max_age_s:
            return None
        return seen[1]

    def last_seen(self) -> ObservedFleet:
        """Every host's last observation, however old: where a lane's containers were last seen."""
        return ObservedFleet({host: observed for host, (_, observed) in self._seen.items()})


def lease_file(desired: DesiredState) -> str:
    return f"{desired.fleet.state_dir_on_host.rstrip('/')}/lease.json"


def model_paths_by_host(desired: DesiredState) -> dict[str, list[str]]:
    paths: dict[str, set[str]] = {name: set() for name in desired.hosts}
    for lane in desired.lanes.values():
        model = desired.models.get(lane.model)
        if model is None:
            continue
        for host in lane.hosts:
            if host in paths:
                paths[host].add(model.path)
    return {host: sorted(p) for host, p in paths.items()}


def _not_installed(result: CommandResult) -> bool:
    return result.exit_status == PROBE_NOT_INSTALLED and result.stderr.startswith(NOT_INSTALLED_MESSAGE)


async def _session(transport: Transport, target: HostTarget, where: str, timeout: float) -> Session:
    """The host's probe session, opened if it has none (or it closed, or runs another copy)."""
    argv = probe_session_argv(where)
    session = await transport.session(target, argv, timeout=timeout)
    if session.idle_s > SESSION_MAX_IDLE_S:
        # Idle this long, the program may be near its own idle exit: a fresh one, before anything is sent.
        await session.close()
        session = await transport.session(target, argv, timeout=timeout)
    return session


async def probe_host(
    transport: Transport,
    target: HostTarget,
    desired: DesiredState,
    paths: list[str],
    timeout: float,
    memory: ProbeMemory | None = None,
) -> ObservedHost:
    """One request on the host's probe session (`facts/probe_serve.py`); a host without the program (or with a
    copy that does not match its hash) is sent it with `install`, whose one-shot answer is this probe's, and
    its session opens at the next probe. Whatever goes wrong reads as `unreachable` with the reason, the
    session closed and the held facts forgotten: the next probe opens a fresh session and asks for everything."""
    memory = memory if memory is not None else ProbeMemory()
    held = memory.get(target.name)
    known = held.digest if held else None
    where = program_path(desired.fleet.state_dir_on_host)
    args = (paths, lease_file(desired), desired.fleet.hf_cache)
    session: Session | None = None
    try:
        line = request_line(known, *args)
        if len(line.encode()) - 1 > REQUEST_MAX_BYTES:  # the program would refuse it, and end its session
            raise PermanentError(f"{target.name}: the probe request is over {REQUEST_MAX_BYTES} bytes (model paths)")
        session = await _session(transport, target, where, timeout)
        try:
            stdout = await session.request(line, timeout=timeout, limit=ANSWER_MAX_BYTES)
        except HostUnreachableError:
            ended = session.ended
            if session.answered or ended is None or not _not_installed(ended):
                raise
            # The launcher refused before the program read anything: nothing was asked, so installing and
            # asking once with `install` is the same probe, not a retry.
            install = installed_probe_argv("install", where, known, *args)
            memory.installs += 1
            result = await transport.run(target, install, input=PROBE_SCRIPT, timeout=timeout, check=False)
            stdout = checked(result).stdout
        observed, facts = parse_probe_answer(target.name, stdout, held, memory.equal_values())
    except LanesError as exc:
        if session is not None:
            await session.close()  # a malformed answer: the stream is not to be trusted again
        memory.forget(target.name)
        return ObservedHost.unreachable(target.name, str(exc))
    memory.hold(target.name, facts, observed)
    return observed


async def observe(
    desired: DesiredState,
    transport: Transport,
    targets: Mapping[str, HostTarget],
    *,
    timeout: float = 30.0,
    concurrency: int = 128,
    memory: ProbeMemory | None = None,
    first: frozenset[str] | None = None,
    max_age_s: float = 0.0,
) -> ObservedFleet:
    """Probe every host in `targets`; or, given `first` (a commit's reaction), probe those hosts and take the
    others' last observation when it is younger than `max_age_s` (a host without one is probed too)."""
    paths = model_paths_by_host(desired)
    gate = asyncio.Semaphore(concurrency)
    memory = memory if memory is not None else ProbeMemory()
    memory.retain(set(targets))
    reused: dict[str, ObservedHost] = {}
    if first is not None:
        for name in targets:
            recent = None if name in first else memory.recent(name, max_age_s)
            if recent is not None:
                reused[name] = recent

    async def one(name: str) -> ObservedHost:
        async with gate:
            return await probe_host(transport, targets[name], desired, paths.get(name, []), timeout, memory)

    names = sorted(n for n in targets if n not in reused)
    hosts = await asyncio.gather(*(one(n) for n in names))
    seen = {**reused, **{h.host: h for h in hosts}}
    return ObservedFleet({name: seen[name] for name in sorted(seen)}, reused=frozenset(reused))
