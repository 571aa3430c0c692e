"""How the daemon scales: simulated fleets of 100, 500 and 1,000 hosts, a four-host lane per four hosts.

    .venv/bin/python bench/scale.py [--sizes 100,500,1000] [--resync-s 80] [--idle-s 60] [--json]

Per size: a state repo like the one `lanes demo --hosts N` grows (generated
hosts only), the simulated fleet in one child process (`reconciler.sim.fleetproc`:
every host's SSH server, plus one shared stand-in process serving every
lane's engine), and the real daemon (`python -m reconciler.cli.main daemon`)
in another, so that its memory and CPU are its own. Printed per size:

- converge: daemon start to the end of its first cycle with every lane healthy
  (informational: every lane boots at once);
- resync: the daemon's own duration of a no-op resync cycle (its `cycle.done`
  log line, the figure behind `/status` and `lanes_last_reconcile_duration_seconds`),
  the commands per host (a command run, or a request on the host's probe session: the
  round trips), the SSH channels opened per host (a command or a session started: none
  for a probe on an open session) and new SSH connections it cost (counted by the
  simulated hosts), the bytes each host received and sent in it, and the daemon's CPU
  seconds in it; goals at 1,000 hosts on 2 cores (issue 27): 1.0 s or less, 0.5 s of
  daemon CPU or less, one round trip per host;
- plan: the pure planner `reconciler.plan.plan_fleet()` on the fleet as observed (the
  bench probes it once itself, over fresh connections: "cold probe"), next to
  the other control-node work of every resync: loading the commit, the policies
  (each the best of five, after a garbage collection);
- peak RSS of the daemon (VmHWM; goal 150 MB or less at 1,000 hosts);
- idle CPU of the daemon between cycles: its threads' CPU time as % of one core over
  `--idle-s` seconds (a minute by default) that provably held no cycle,
  opened `--settle-s` after a no-op resync ended (the daemon as it sits
  converged, not in the wake of its first deployment), goal under 0.1 %;
  with the CPU of its child processes in that window (git fetch) and its
  wake-ups per second (voluntary context switches of all its threads) beside it;

then how each grows with size. `--profile DIR` runs the daemon under cProfile (a stats file per
cycle), `--profile DIR --memory` with tracemalloc snapshots instead (bench/profiled_daemon.py); their
CPU figures are then the profiler's. Not a test: it prints numbers. Every process it
starts is ended by its pid, on ^C too; it uses loopback addresses of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import itertools
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pygit2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, like the other benches

from benchstate import fleet_without_gateway  # bench/benchstate.py, next to this script

from reconciler.execute.cycle import HostOverride, targets_for
from reconciler.lane import LaneHealth, LaneState
from reconciler.logsetup import configure
from reconciler.observe.probe import observe
from reconciler.plan import PlanOptions, fingerprint, plan_fleet
from reconciler.policy import evaluate
from reconciler.sim.fleetproc import FleetProcess
from reconciler.source.loadcommit import LoadedCommit, load_commit
from reconciler.transport.ssh import SSHTransport

REPO = Path(__file__).resolve().parents[1]
MODEL = "minimax-m3.1-flash"
CLK_TCK = os.sysconf("SC_CLK_TCK")
GOALS = (
    "goals at 1,000 hosts (issue 27): resync <= 1.0 s with 1 round trip per host, daemon CPU per resync <= 0.5 s, "
    "peak RSS <= 150 MB, idle CPU < 0.1% over a minute or more"
)


# -- the state repo ---------------------------------------------------------------------


def build_repo(path: Path, hosts: int) -> Path:
    """Hosts sim-0000... and a four-host vLLM TP4 lane per four hosts, as `lanes demo --hosts` adds them."""
    image = next(
        line.split()[1]
        for line in (REPO / "state/lanes/eugr-nightly-dsv41-3x.yaml").read_text().splitlines()
        if line.startswith("image:")
    )
    files = {
        "state/fleet.yaml": fleet_without_gateway((REPO / "state/fleet.yaml").read_text()).encode(),
        f"state/models/{MODEL}.yaml": (REPO / f"state/models/{MODEL}.yaml").read_bytes(),
    }
    files |= {f"policies/{p.name}": p.read_bytes() for p in sorted((REPO / "policies").glob("*.yaml"))}
    names = [f"sim-{i:04d}" for i in range(hosts)]
    for i, name in enumerate(names):  # addresses that route nowhere: the daemon config overrides each one
        files[f"state/hosts/{name}.yaml"] = (
            f"address: 198.18.{i // 250}.{i % 250 + 1}\n"  # one switch for the data plane: a /9 holds them all
            f"data_plane: [{{interface: enp1s0f0np0, address: 10.{128 + i // 250}.{i % 250}.1/9, hca: rocep1s0f0}}]\n"
        ).encode()
    for g in range(hosts // 4):
        files[f"state/lanes/sim-minimax-{g:04d}.yaml"] = (
            f"engine: vllm\nengine_version: 0.32.1.dev0+g8244d1c44\nimage: {image}\n"
            f"model: {MODEL}\nserved_model_name: minimax-{g:04d}\nhosts: [{', '.join(names[4 * g : 4 * g + 4])}]\n"
            "tp: 4\nmax_model_len: 131072\ngpu_memory_utilization: 0.75\nport: 8000\nhealth:\n  poll_interval_s: 0.5\n"
        ).encode()
    repo = pygit2.init_repository(str(path), initial_head="main")
    index = pygit2.Index()
    for name, data in sorted(files.items()):
        index.add(pygit2.IndexEntry(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
    who = pygit2.Signature("lanes bench", "bench@localhost")
    repo.create_commit("refs/heads/main", who, who, f"{hosts} simulated hosts", index.write_tree(repo), [])
    return path


def fleet_spec(loaded: LoadedCommit, work_dir: Path, base: str) -> dict[str, Any]:
    desired = loaded.desired
    models: dict[str, list[tuple[str, int]]] = {}
    for lane in desired.lanes.values():
        model = desired.models[lane.model]
        for host in lane.hosts:
            models.setdefault(host, []).append((model.path, model.weight_bytes))
    # The engines are ready at once and stream fast: the bench measures the reconciler, not model loads.
    images = {lane.image: {"STANDIN_LOAD_S": "0", "STANDIN_TG_TPS": "1000"} for lane in desired.lanes.values()}
    return {
        "hosts": sorted(desired.hosts),
        "base_address": base,
        "work_dir": str(work_dir),
        "shared_standin": True,
        "images": images,
        "models": models,
        "data_plane": {n: [(p.interface, p.address, p.hca) for p in h.data_plane] for n, h in desired.hosts.items()},
    }


def write_config(
    tmp: Path, repo: Path, ready: dict[str, Any], http_port: int, resync_s: float, health_s: float | None = None
) -> Path:
    (tmp / "secrets").mkdir(mode=0o700, exist_ok=True)
    health = f"health_interval_s = {health_s}\n" if health_s else ""
    hosts = "".join(
        f'[hosts.{name}]\naddress = "{address}"\nport = {ready["port"]}\nuser = "lanes"\n'
        for name, address in ready["addresses"].items()
    )
    text = (
        f'[repo]\nurl = "{repo}"\nbranch = "main"\nmirror_dir = "{tmp / "mirror"}"\nresync_interval_s = {resync_s}\n'
        f'[ssh]\nkey = "{ready["client_key"]}"\nknown_hosts = "{ready["known_hosts"]}"\n'
        f'[daemon]\nowner = "lanes-bench"\ndb = "{tmp / "daemon.db"}"\nsecrets_dir = "{tmp / "secrets"}"\n'
        f'log_level = "info"\n{health}[http]\nlisten = "127.0.0.1:{http_port}"\n{hosts}'
    )
    path = tmp / "reconciler.toml"
    path.write_text(text)
    return path


# -- the daemon process ---------------------------------------------------------------------


def _die_with_parent() -> None:
    # A bench killed with SIGKILL cannot clean up: the kernel then sends the daemon SIGTERM (PR_SET_PDEATHSIG).
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def start_daemon(config: Path, log: Path, profile: Path | None = None, memory: bool = False) -> subprocess.Popen[bytes]:
    # `--profile`: the same daemon under cProfile, a stats file per cycle, or with `--memory` tracemalloc
    # snapshots (bench/profiled_daemon.py).
    head = [sys.executable, "-m", "reconciler.cli.main"]
    if profile is not None:
        head = [sys.executable, str(Path(__file__).resolve().parent / "profiled_daemon.py"), str(profile)]
        head += ["--memory"] if memory else []
    with log.open("ab") as out:
        return subprocess.Popen(
            [*head, "daemon", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=config.parent,
            start_new_session=True,  # ^C reaches the bench only, which then stops the daemon by pid
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - the bench has no other thread when it forks
        )


def stop_process(proc: subprocess.Popen[bytes] | None, grace_s: float = 30.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def proc_status(pid: int, key: str) -> float:
    """A /proc/<pid>/status figure in MB (VmHWM: peak resident set, VmRSS: now)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return math.nan


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads), from /proc/<pid>/stat."""
    return cpu_times(pid)[0]


def cpu_times(pid: int) -> tuple[float, float]:
    """(utime + stime, cutime + cstime): the process's own CPU and that of its children it has waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK, (int(fields[13]) + int(fields[14])) / CLK_TCK


def wakeups(pid: int) -> int:
    """Voluntary context switches of every thread: how often the process went to sleep, so woke up."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """Nanoseconds on a CPU per thread (/proc/<pid>/task/<tid>/schedstat): /proc/<pid>/stat counts
    in ticks of 10 ms, too coarse for a daemon that sleeps for a minute."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            out[task.name] = int((task / "schedstat").read_text().split()[0])
    return out


def idle_window(pid: int, settle_s: float, length_s: float) -> dict[str, float]:
    """CPU and wake-ups of the daemon over `length_s`, from `settle_s` after now (a cycle just ended)."""
    time.sleep(settle_s)  # the cycle's last records and the bench's own /status request are the cycle's
    (own0, kids0), ns0, woke0, t0 = cpu_times(pid), thread_cpu_ns(pid), wakeups(pid), time.time()
    time.sleep(length_s)
    (own1, kids1), ns1, woke1, t1 = cpu_times(pid), thread_cpu_ns(pid), wakeups(pid), time.time()
    cpu = own1 - own0
    if ns0.keys() <= ns1.keys():  # no thread ended in the window (its time would be missing): the finer figure
        cpu = sum(ns - ns0.get(tid, 0) for tid, ns in ns1.items()) / 1e9
    return {"start": t0, "end": t1, "cpu_s": cpu, "children_cpu_s": kids1 - kids0, "wakeups": woke1 - woke0}


def status(http_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/status", timeout=30) as r:
        data: dict[str, Any] = json.load(r)
        return data


class LogTail:
    """The daemon's JSON log lines, read as they are written (reading costs the daemon nothing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._rest = b""

    def events(self) -> Iterator[dict[str, Any]]:
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        *lines, self._rest = (self._rest + data).split(b"\n")
        for line in lines:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    yield event

    def wait_cycle(self, daemon: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
        """The next `cycle.done` line, with the wall-clock time its cycle started and ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if event.get("event") == "cycle.done":
                    end = datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()
                    return {**event, "ended": end, "started": end - float(event["seconds"])}
            if daemon.poll() is not None:
                raise RuntimeError(f"the daemon exited ({daemon.returncode}); see {self.path}")
            time.sleep(0.2)
        raise TimeoutError(f"no cycle finished within {timeout:g} s; see {self.path}")

    def wait_event(self, daemon: subprocess.Popen[bytes], name: str, lane: str, timeout: float) -> float:
        """The wall-clock time of the next `name` event about `lane`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if event.get("event") == name and event.get("lane") == lane:
                    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()
            if daemon.poll() is not None:
                raise RuntimeError(f"the daemon exited ({daemon.returncode}); see {self.path}")
            time.sleep(0.02)
        raise TimeoutError(f"no {name} for {lane} within {timeout:g} s; see {self.path}")


REACTION_LANE = "sim-minimax-0000"


def commit_lane_env(repo_path: Path, lane: str) -> None:
    """A commit that gives `lane` one more environment variable: a restart of its ranks, with engine arguments
    its image judged already (no preflight), as a revert or an env fix is."""
    repo = pygit2.Repository(str(repo_path))
    head = repo.revparse_single("refs/heads/main")
    path = f"state/lanes/{lane}.yaml"
    blob = head.peel(pygit2.Tree) / path
    text = blob.data.decode() + 'env:\n  LANES_BENCH_REACTION: "1"\n'  # type: ignore[union-attr]
    index = pygit2.Index()
    index.read_tree(head.peel(pygit2.Tree))
    index.add(pygit2.IndexEntry(path, repo.create_blob(text.encode()), pygit2.enums.FileMode.BLOB))
    who = pygit2.Signature("lanes bench", "bench@localhost")
    repo.create_commit("refs/heads/main", who, who, f"{lane}: one more env var", index.write_tree(repo), [head.id])


def measure_reaction(repo: Path, tail: LogTail, daemon: subprocess.Popen[bytes], timeout: float) -> dict[str, float]:
    """From a commit that changes one lane to the first command of its change (the lease on its hosts), and to
    the end of the full cycle that follows: what an operator waits for after a push."""
    for _ in tail.events():  # what the daemon said before the commit is not about it
        pass
    t0 = time.time()
    commit_lane_env(repo, REACTION_LANE)
    first = tail.wait_event(daemon, "lane.lease.started", REACTION_LANE, timeout)
    return {"commit_to_first_command_s": first - t0}


# -- measuring ----------------------------------------------------------------------------


async def control_node_work(loaded: LoadedCommit, repo: Path, ready: dict[str, Any]) -> dict[str, float]:
    """Time what a resync does besides waiting on hosts: load the commit, evaluate policies, plan."""
    overrides = {n: HostOverride(a, int(ready["port"]), "lanes") for n, a in ready["addresses"].items()}
    targets = targets_for(loaded.desired, overrides)
    transport = SSHTransport(Path(ready["known_hosts"]), [Path(ready["client_key"])])
    try:
        t = time.perf_counter()
        observed = await observe(loaded.desired, transport, targets, concurrency=64)
        cold = time.perf_counter() - t
    finally:
        await transport.close()
    unreachable = len(observed.unreachable())
    loads, evals, plans = [], [], []
    for _ in range(5):
        # A collection first, so no step pays for the garbage of the one before (at 1,000 hosts a full
        # collection costs 50-150 ms, and would land on whichever step happened to trigger it).
        gc.collect()
        t = time.perf_counter()
        again = load_commit(repo)
        loads.append(time.perf_counter() - t)
        gc.collect()
        t = time.perf_counter()
        verdict = evaluate(again.desired, again.policies)
        evals.append(time.perf_counter() - t)
        gc.collect()
        t = time.perf_counter()
        # As the daemon plans once every lane's gate has passed: in sync is a noop, not a verify.
        ready = {
            name: LaneState(LaneHealth.HEALTHY, serving=fingerprint(specs)) for name, specs in verdict.rendered.items()
        }
        fleet_plan = plan_fleet(again.desired, observed, verdict, PlanOptions(owner="lanes-bench", lanes=ready))
        plans.append(time.perf_counter() - t)
    pending = sum(1 for lp in fleet_plan.lanes if lp.action != "noop")
    return {
        "cold_probe_s": cold,
        "unreachable": unreachable,
        # Best of five: other work on the machine only ever adds time.
        "load_commit_s": min(loads),
        "evaluate_s": min(evals),
        "plan_s": min(plans),
        "plan_pending_lanes": pending,
    }


def loopback_base(index: int) -> str:
    """127.N. (N from 250 to 254, by pid and size): clear of the tests' 127.30-.99 and of `lanes demo`'s
    127.100-.249, so the bench can run next to either."""
    return f"127.{250 + (os.getpid() + index) % 5}."


def median(values: Iterator[float] | list[float]) -> float:
    """Median of the figures that could be taken (NaN marks one that could not), NaN if none."""
    taken = [v for v in values if not math.isnan(v)]
    return statistics.median(taken) if taken else math.nan


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_size(hosts: int, index: int, args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"lanes-scale-{hosts}-"))
    fleet: FleetProcess | None = None
    daemon: subprocess.Popen[bytes] | None = None
    try:
        repo = build_repo(tmp / "state-repo", hosts)
        loaded = load_commit(repo)
        lanes = len(loaded.desired.lanes)
        fleet = FleetProcess(fleet_spec(loaded, tmp / "sim", loopback_base(index)), tmp / "sim")
        t = time.monotonic()
        ready = fleet.start()
        sim_up = time.monotonic() - t
        http_port = free_port()
        log = tmp / "daemon.log"
        config = write_config(tmp, repo, ready, http_port, args.resync_s, args.health_s)
        daemon = start_daemon(config, log, args.profile, args.memory)
        t0 = time.time()
        tail = LogTail(log)
        converge_s, first_cycle_rss = math.nan, math.nan
        while math.isnan(converge_s):  # the first cycle that leaves every lane healthy
            cycle = tail.wait_cycle(daemon, args.timeout_s)
            if math.isnan(first_cycle_rss):  # the cold probe's share of the peak: connections, install, probe
                first_cycle_rss = proc_status(daemon.pid, "VmHWM")
            rows = status(http_port)["lanes"]
            if all(r["health"] == "healthy" for r in rows) and len(rows) == lanes:
                converge_s = cycle["ended"] - t0
        # The resync after convergence is not a no-op for the probe: it is the first to see the containers
        # the converging cycle started (their digest changed), so every host answers in whole. Untimed.
        tail.wait_cycle(daemon, args.resync_s + args.timeout_s)
        resyncs: list[dict[str, Any]] = []
        idle: list[dict[str, float]] = []
        for _ in range(args.resyncs + 3):  # a few spare cycles in case one follows another at once
            if len(resyncs) >= args.resyncs and idle:
                break
            before, cpu0, snap = fleet.counts(), cpu_seconds(daemon.pid), time.time()
            window = None
            if resyncs and resyncs[-1]["reasons"] == ["resync"] and not idle:
                # After a no-op resync; the window must end before the next cycle starts.
                window = idle_window(daemon.pid, args.settle_s, args.idle_s)
            cycle = tail.wait_cycle(daemon, args.resync_s + args.timeout_s)
            after, cpu1 = fleet.counts(), cpu_seconds(daemon.pid)
            idle_cpu = 0.0  # the CPU of a window that held no cycle, which is not the cycle's
            if window is not None and cycle["started"] > window["end"]:
                idle.append(window)
                idle_cpu = window["cpu_s"]
            reasons = status(http_port)["last_cycle"].get("reasons", [])
            clean = cycle["started"] > snap  # the counts before were taken while no cycle ran
            per_host = [after[h][0] - before[h][0] for h in after] if clean else []
            resyncs.append(
                {
                    "seconds": float(cycle["seconds"]),
                    "reasons": reasons,
                    "commands_per_host": statistics.mean(per_host) if per_host else math.nan,
                    "max_commands_per_host": max(per_host) if per_host else math.nan,
                    # Exec channels opened (commands run, sessions started) and requests on the probe sessions.
                    "channels_per_host": statistics.mean(after[h][4] - before[h][4] for h in after)
                    if clean
                    else math.nan,
                    "requests_per_host": statistics.mean(after[h][5] - before[h][5] for h in after)
                    if clean
                    else math.nan,
                    "handshakes": sum(after[h][1] - before[h][1] for h in after) if clean else math.nan,
                    # Command lines, stdin, stdout and stderr per host (SSH framing and encryption aside).
                    "bytes_in_per_host": statistics.mean(after[h][2] - before[h][2] for h in after)
                    if clean
                    else math.nan,
                    "bytes_out_per_host": statistics.mean(after[h][3] - before[h][3] for h in after)
                    if clean
                    else math.nan,
                    # Daemon CPU from the previous cycle's end to this one's, less an idle window before it.
                    "cpu_s": cpu1 - cpu0 - idle_cpu if clean else math.nan,
                }
            )
        reaction = measure_reaction(repo, tail, daemon, args.timeout_s)
        work = asyncio.run(control_node_work(loaded, repo, ready))
        noop = [r for r in resyncs if r["reasons"] == ["resync"]] or resyncs
        return {
            "hosts": hosts,
            "lanes": lanes,
            "sim_up_s": sim_up,
            "converge_s": converge_s,
            "resync_s": median(r["seconds"] for r in noop),
            "resyncs": resyncs,
            "commands_per_host": median(r["commands_per_host"] for r in noop),
            "channels_per_host": median(r["channels_per_host"] for r in noop),
            "requests_per_host": median(r["requests_per_host"] for r in noop),
            "handshakes": median(r["handshakes"] for r in noop),
            "bytes_in_per_host": median(r["bytes_in_per_host"] for r in noop),
            "bytes_out_per_host": median(r["bytes_out_per_host"] for r in noop),
            "resync_cpu_s": median(r["cpu_s"] for r in noop),
            "peak_rss_mb": proc_status(daemon.pid, "VmHWM"),
            "first_cycle_rss_mb": first_cycle_rss,
            "rss_mb": proc_status(daemon.pid, "VmRSS"),
            "idle_cpu_pct": median(100.0 * w["cpu_s"] / (w["end"] - w["start"]) for w in idle),
            "idle_children_cpu_pct": median(100.0 * w["children_cpu_s"] / (w["end"] - w["start"]) for w in idle),
            "idle_wakeups_per_s": median(w["wakeups"] / (w["end"] - w["start"]) for w in idle),
            "idle_window_s": median(w["end"] - w["start"] for w in idle),
            "load_avg_1m": os.getloadavg()[0],  # other work on the machine competes for the same cores
            "sim_rss_mb": proc_status(fleet.pid, "VmHWM"),
            "standin_rss_mb": proc_status(int(ready["standin_pid"]), "VmHWM"),
            **reaction,
            **work,
        }
    finally:
        try:
            stop_process(daemon)
        finally:  # a second ^C while the daemon stops must not leave the fleet running
            if fleet is not None:
                fleet.close()
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


# -- printing -------------------------------------------------------------------------------

COLUMNS = [
    ("hosts", "hosts", "{:>5d}"),
    ("lanes", "lanes", "{:>5d}"),
    ("converge s", "converge_s", "{:>10.1f}"),
    ("resync s", "resync_s", "{:>8.2f}"),
    ("cmds/host", "commands_per_host", "{:>9.2f}"),
    ("chans/host", "channels_per_host", "{:>10.2f}"),
    ("reqs/host", "requests_per_host", "{:>9.2f}"),
    ("new conns", "handshakes", "{:>9.0f}"),
    ("B in/host", "bytes_in_per_host", "{:>9.0f}"),
    ("B out/host", "bytes_out_per_host", "{:>10.0f}"),
    ("resync CPU s", "resync_cpu_s", "{:>12.2f}"),
    ("push->cmd s", "commit_to_first_command_s", "{:>11.2f}"),
    ("plan ms", "plan_s", "{:>7.1f}"),
    ("load ms", "load_commit_s", "{:>7.0f}"),
    ("policy ms", "evaluate_s", "{:>9.0f}"),
    ("peak RSS MB", "peak_rss_mb", "{:>11.1f}"),
    ("idle CPU %", "idle_cpu_pct", "{:>10.2f}"),
]
MS = {"plan_s", "load_commit_s", "evaluate_s"}
GROWTH = ["resync_s", "resync_cpu_s", "plan_s", "load_commit_s", "evaluate_s", "peak_rss_mb", "idle_cpu_pct"]


def print_table(results: list[dict[str, Any]]) -> None:
    print("  ".join(f"{title:>{len(fmt.format(0) if 'd' in fmt else fmt.format(0.0))}}" for title, _, fmt in COLUMNS))
    for r in results:
        cells = []
        for _, key, fmt in COLUMNS:
            value = r[key] * 1000 if key in MS else r[key]
            cells.append(fmt.format(value) if not (isinstance(value, float) and math.isnan(value)) else "    n/a")
        print("  ".join(cells))
    for r in results:
        cycles = ", ".join(f"{x['seconds']:.2f} s ({'+'.join(x['reasons'])})" for x in r["resyncs"])
        print(
            f"  {r['hosts']} hosts: simulated fleet up in {r['sim_up_s']:.1f} s; cold probe (new connections) "
            f"{r['cold_probe_s']:.2f} s, {r['unreachable']} unreachable, {r['plan_pending_lanes']} lanes pending; "
            f"cycles timed {cycles}; "
            f"daemon peak RSS after its first cycle {r['first_cycle_rss_mb']:.0f} MB, now {r['rss_mb']:.0f} MB; "
            f"sim {r['sim_rss_mb']:.0f} MB, "
            f"stand-in {r['standin_rss_mb']:.0f} MB; load average {r['load_avg_1m']:.1f}; "
            f"idle over {r['idle_window_s']:.0f} s: daemon {r['idle_cpu_pct']:.3f} %, its children (git fetch) "
            f"{r['idle_children_cpu_pct']:.3f} %, {r['idle_wakeups_per_s']:.2f} wake-ups/s"
        )


def print_growth(results: list[dict[str, Any]]) -> None:
    if len(results) < 2:
        return
    print("growth: ratio to the smaller size (exponent k in size^k: 1 is linear, 0 flat)")
    for a, b in itertools.pairwise(results):
        size = b["hosts"] / a["hosts"]
        parts = []
        for key in GROWTH:
            if a[key] > 0 and b[key] > 0:
                ratio = b[key] / a[key]
                name = key.removesuffix("_s").removesuffix("_pct")
                parts.append(f"{name} x{ratio:.2f} (k={math.log(ratio) / math.log(size):.2f})")
        print(f"  {a['hosts']} -> {b['hosts']} hosts (x{size:g}): " + ", ".join(parts))


def _no_nan(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, (100, 500, 1000))), help="comma-separated host counts")
    parser.add_argument(
        "--resync-s", type=float, default=80.0, help="the daemon's resync_interval_s (10 or more, above the window)"
    )
    parser.add_argument("--resyncs", type=int, default=2, help="no-op resyncs to time per size")
    parser.add_argument(
        "--health-s",
        type=float,
        default=None,
        help="the daemon's [daemon] health_interval_s (default: its own); a day keeps its health rounds out of "
        "the figures, which then are the cycles' own",
    )
    parser.add_argument("--idle-s", type=float, default=60.0, help="length of the idle-CPU window")
    parser.add_argument(
        "--settle-s", type=float, default=2.0, help="the idle window opens this long after a no-op resync ends"
    )
    parser.add_argument("--timeout-s", type=float, default=900.0, help="give up on a cycle after this long")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument(
        "--profile", type=Path, help="run the daemon under cProfile, one stats file per cycle in this folder"
    )
    parser.add_argument("--memory", action="store_true", help="with --profile: tracemalloc snapshots, not cProfile")
    parser.add_argument("--keep", action="store_true", help="keep each size's temporary folder (logs, repo)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    if args.settle_s + args.idle_s + 10 > args.resync_s:
        parser.error("--settle-s plus --idle-s must leave at least 10 s of the resync interval for the cycle itself")
    configure("warning")  # the bench's own probe would log a line per connection on its output
    # SIGTERM to the bench unwinds like ^C, so every child is stopped by its pid.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    results = []
    t0 = time.monotonic()
    try:
        for i, hosts in enumerate(sizes):
            if not args.json:
                print(f"... {hosts} hosts", file=sys.stderr, flush=True)
            results.append(run_size(hosts, i, args))
    except KeyboardInterrupt:
        print("interrupted: every process this bench started has been stopped", file=sys.stderr)
        sys.exit(130)
    if args.json:
        out = {"results": results, "bench_s": time.monotonic() - t0, "cpus": os.cpu_count(), "goals": GOALS}
        print(json.dumps(_no_nan(out), indent=2))  # NaN is not JSON: figures that could not be taken are null
        return
    print(f"daemon on simulated Sparks, {os.cpu_count()} CPUs, resync every {args.resync_s:g} s; {GOALS}")
    print_table(results)
    print_growth(results)
    print(f"bench took {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
