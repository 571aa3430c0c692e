"""`lanes demo`: the example fleet converged onto simulated Sparks, end to end.

Everything but the GPUs is real: an SSH server per host on its own loopback
address, host keys pinned in a known_hosts file, the reconciler's own
commands, a docker-compatible runtime, and one engine stand-in process per
running container that loads, serves and streams tokens.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pygit2
import typer
from rich.console import Console

from reconciler.cli.common import EXIT_DENY, EXIT_OK, handle_errors
from reconciler.cli.demogateway import start_gateway
from reconciler.cli.planview import print_plan
from reconciler.cli.progress import StepPrinter
from reconciler.cli.reconcile import print_status
from reconciler.errors import InputError
from reconciler.execute.cycle import CycleResult, CycleRunner, CycleSettings, HostOverride
from reconciler.execute.secrets import SecretStore
from reconciler.sim import SimFleet, SimRegistry
from reconciler.sim.hostfacts import apply_state
from reconciler.source.gitread import open_repo
from reconciler.source.loadcommit import LoadedCommit, load_commit
from reconciler.store.journal import Store
from reconciler.store.status import status_rows
from reconciler.transport.ssh import SSHTransport

DEMO_SECRET = "hf_demo_value_for_simulated_sparks"  # noqa: S105 - a stand-in for the demo's fake hosts
STANDIN_ENV = {"STANDIN_LOAD_S": "2", "STANDIN_PP_TPS": "4000", "STANDIN_TG_TPS": "60"}


@dataclass
class DemoEnv:
    workdir: Path
    clone: Path
    fleet: SimFleet
    runner: CycleRunner
    store: Store
    transport: SSHTransport


def clone_repo(source: str, dest: Path) -> Path:
    repo = open_repo(source)
    workdir = repo.workdir or repo.path
    pygit2.clone_repository(str(workdir), str(dest))
    return dest


def registry_for(loaded: LoadedCommit, standin_env: Mapping[str, str] | None = None) -> SimRegistry:
    registry = SimRegistry()
    for lane in loaded.desired.lanes.values():
        if registry.resolve(lane.image) is None:
            # The image carries its engine release, so the stand-in judges flags as that release would.
            env = {**STANDIN_ENV, "STANDIN_VERSION": lane.engine_version, **(standin_env or {})}
            registry.add(lane.image, env=env)
    return registry


def add_models(fleet: SimFleet, loaded: LoadedCommit) -> None:
    desired = loaded.desired
    for lane in desired.lanes.values():
        model = desired.models[lane.model]
        for host in lane.hosts:
            if host in desired.hosts:
                fleet.runtime(host).add_model_path(model.path, model.weight_bytes)


def loopback_base(salt: int = 0) -> str:
    """A loopback /24 of this process's own, so two demos (or a demo and the tests) never share addresses."""
    n = os.getpid() * 7 + salt
    return f"127.{100 + n % 150}.{n // 150 % 250}."


async def start_sim(
    loaded: LoadedCommit,
    workdir: Path,
    *,
    base_address: str | None = None,
    clone: Path | None = None,
    standin_env: Mapping[str, str] | None = None,
) -> DemoEnv:
    """Simulated Sparks for every host of `loaded`, and a reconciler wired to them."""
    fleet = SimFleet(
        sorted(loaded.desired.hosts),
        registry=registry_for(loaded, standin_env),
        work_dir=workdir / "sim",
        base_address=base_address or loopback_base(),
    )
    await fleet.__aenter__()
    add_models(fleet, loaded)
    apply_state(fleet, loaded.desired)  # each host's data plane as its host file says
    secrets = workdir / "secrets"
    secrets.mkdir(mode=0o700, exist_ok=True)
    for lane in loaded.desired.lanes.values():
        for secret in lane.secrets:
            (secrets / secret.name).write_text(DEMO_SECRET)
    overrides = {name: HostOverride(address=t.address, port=t.port, user=t.user) for name, t in fleet.targets.items()}
    transport = SSHTransport(fleet.known_hosts_path, [fleet.client_key_path])
    store = Store(workdir / "lanes.db")
    settings = CycleSettings(owner="lanes-demo", overrides=overrides, watch_interval_s=1.0)
    runner = CycleRunner(transport, store, SecretStore(secrets), settings)
    return DemoEnv(workdir, clone or workdir, fleet, runner, store, transport)


def grow_fleet(clone: Path, total_hosts: int) -> None:
    """Add simulated hosts `sim-NNNN` (and a four-host lane per four of them) to the clone, as a commit."""
    repo = pygit2.Repository(str(clone))
    loaded = load_commit(repo)
    have = len(loaded.desired.hosts)
    if total_hosts < have:
        raise InputError(f"the example fleet has {have} hosts; --hosts must be at least that", field="--hosts")
    extra = [f"sim-{i:04d}" for i in range(total_hosts - have)]
    image = loaded.desired.lanes["eugr-nightly-dsv41-3x"].image
    for i, name in enumerate(extra):
        (clone / "state" / "hosts" / f"{name}.yaml").write_text(f"address: 198.18.{i // 250}.{i % 250 + 1}\n")
    for g in range(len(extra) // 4):
        hosts = ", ".join(extra[g * 4 : g * 4 + 4])
        (clone / "state" / "lanes" / f"sim-minimax-{g:04d}.yaml").write_text(
            f"engine: vllm\nengine_version: 0.32.1.dev0+g8244d1c44\nimage: {image}\n"
            f"model: minimax-m3.1-flash\nserved_model_name: minimax-{g:04d}\nhosts: [{hosts}]\ntp: 4\n"
            "max_model_len: 131072\ngpu_memory_utilization: 0.75\nport: 8000\nhealth:\n  poll_interval_s: 0.5\n"
        )
    repo.index.add_all()
    repo.index.write()
    who = pygit2.Signature("lanes demo", "demo@localhost")
    tree = repo.index.write_tree()
    repo.create_commit(
        "HEAD", who, who, f"demo: grow the fleet to {total_hosts} simulated hosts", tree, [repo.head.target]
    )


async def start_demo(repo: str, workdir: Path, hosts: int | None = None) -> DemoEnv:
    clone = clone_repo(repo, workdir / "state-repo")
    if hosts is not None:
        grow_fleet(clone, hosts)
    return await start_sim(load_commit(clone), workdir, clone=clone)


async def stop_demo(env: DemoEnv) -> None:
    await env.transport.close()
    await env.fleet.close()
    env.store.close()


def converged(rows: list[dict[str, Any]]) -> bool:
    return all(r["health"] == ("healthy" if r["desired"] == "running" else "stopped") for r in rows)


@handle_errors
def demo(
    repo: Annotated[str, typer.Option("--repo", help="state repository to clone")] = ".",
    once: Annotated[bool, typer.Option("--once", help="exit when converged (0) or failed (1)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    resync_s: Annotated[float, typer.Option(help="seconds between resyncs in continuous mode")] = 10.0,
    hosts: Annotated[
        int | None,
        typer.Option(
            "--hosts",
            help="simulate this many hosts (the example fleet's 7 plus generated ones, a four-host lane per four)",
        ),
    ] = None,
    keep: Annotated[bool, typer.Option(help="keep the temporary folder")] = False,
) -> None:
    """Start simulated Sparks for the example fleet and converge state/ onto them."""
    console = Console(stderr=True)
    workdir = Path(tempfile.mkdtemp(prefix="lanes-demo-"))
    code = EXIT_OK

    async def go() -> int:
        t0 = time.monotonic()
        env = await start_demo(repo, workdir, hosts)
        try:
            loaded = load_commit(env.clone)
            if not as_json:
                console.print(
                    f"simulated Sparks: {', '.join(f'{n}={t.address}:{t.port}' for n, t in env.fleet.targets.items())}",
                    highlight=False,
                    soft_wrap=True,
                )
            with StepPrinter(console, live=False if as_json else None) as show:
                first = await env.runner.run_cycle(loaded, progress=None if as_json else show)
            second = await env.runner.run_cycle(loaded, apply=False)
            rows = status_rows(env.store, loaded.desired)
            if once:
                code = EXIT_OK if converged(rows) and first.ok else EXIT_DENY
                report(first, second, rows, time.monotonic() - t0, as_json, console, code)
                return code
            print_status(rows, console)
            await run_daemon_on(env, console, resync_s)
            return EXIT_OK
        finally:
            await stop_demo(env)

    try:
        code = asyncio.run(go())
    except KeyboardInterrupt:
        code = EXIT_OK
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    raise typer.Exit(code)


async def run_daemon_on(env: DemoEnv, console: Console, resync_s: float) -> None:
    """The real daemon, watching the temporary clone, driving the simulated Sparks until Ctrl-C."""
    from reconciler.daemon.config import load_config
    from reconciler.daemon.service import Daemon

    branch = pygit2.Repository(str(env.clone)).head.shorthand
    hosts = "".join(
        f'[hosts.{name}]\naddress = "{t.address}"\nport = {t.port}\nuser = "{t.user}"\n'
        for name, t in env.fleet.targets.items()
    )
    config_path = env.workdir / "reconciler.toml"
    http_port = _free_loopback_port()  # known before the daemon starts, so it can be printed below
    gateway = start_gateway(env.workdir)  # the real SMG in front of the simulated Sparks, when installed
    routes = (
        f'[gateway]\nenabled = true\nurl = "{gateway.url}"\nkey_file = "{gateway.key_file}"\n'
        f"metrics_port = {gateway.metrics_port}\ninterval_s = 10\n"
        if gateway is not None
        else ""
    )
    config_path.write_text(
        f'[repo]\nurl = "{env.clone}"\nbranch = "{branch}"\nmirror_dir = "{env.workdir / "mirror"}"\n'
        f"resync_interval_s = {max(resync_s, 10.0)}\n"
        f'[ssh]\nkey = "{env.fleet.client_key_path}"\nknown_hosts = "{env.fleet.known_hosts_path}"\n'
        f'[daemon]\nowner = "lanes-demo"\ndb = "{env.workdir / "lanes.db"}"\n'
        f'secrets_dir = "{env.workdir / "secrets"}"\nlog_level = "info"\n'
        f'[http]\nlisten = "127.0.0.1:{http_port}"\n{routes}{hosts}'
    )
    config = load_config(config_path)
    print_paste_hint(console, env.clone, http_port, gateway.url if gateway is not None else None)
    env.store.close()
    try:
        await Daemon(config, config_path).run()
    finally:
        if gateway is not None:
            gateway.stop()


def print_paste_hint(console: Console, clone: Path, http_port: int, gateway: str | None = None) -> None:
    """What to try next; the commands to paste stay on one line each, however narrow the terminal."""
    lane = f"{clone}/state/lanes/eugr-nightly-dsv41-3x.yaml"
    body = '{"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}'
    served = (
        f"the gateway (SMG) serves each model at one address, across changes: curl {gateway}/v1/chat/completions "
        f"-H 'content-type: application/json' -d '{body}'\n"
        if gateway is not None
        else "smg is not installed (scripts/setup installs it): the demo runs without a gateway\n"
    )
    console.print(
        f"\nThe daemon now watches {clone} (Ctrl-C stops it). Change a lane and commit, e.g.:\n"
        f"  sed -i 's/max_num_seqs: 8/max_num_seqs: 4/' {lane}\n"
        f"  git -C {clone} commit -am 'eugr: 4 sequences'\n"
        f"then: lanes status --daemon http://127.0.0.1:{http_port}\n"
        f"or open the dashboard: http://127.0.0.1:{http_port}/\n{served}",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )


def _free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def report(
    first: CycleResult,
    second: CycleResult,
    rows: list[dict[str, Any]],
    elapsed: float,
    as_json: bool,
    console: Console,
    code: int = EXIT_OK,
) -> None:
    if as_json:
        print(
            json.dumps(
                {
                    "ok": code == EXIT_OK,
                    "exit_code": code,
                    "commit": first.commit,
                    "converged": converged(rows),
                    "seconds": round(elapsed, 2),
                    "second_plan_empty": second.plan.empty,
                    "lanes": rows,
                },
                indent=2,
                default=str,
            )
        )
        return
    print_status(rows, Console())
    if not second.plan.empty:
        print_plan(second, console)
    console.print(
        f"converged in {elapsed:.1f} s; a second cycle has {'nothing to do' if second.plan.empty else 'changes'}"
    )
