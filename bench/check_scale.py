"""How long `lanes check` takes on a big fleet: 1,000 hosts, 1,000 lanes.

Generates the state as file bytes in memory (single-host lanes and
multi-host TP/PP lanes, some sharing hosts, a quarter stopped), then times
load_desired, load_policies and evaluate separately and in total, in wall seconds and in this
process's CPU seconds (on a shared machine the wall time says as much about the other processes;
the load average is printed with them). The goal is 1.0 s or less (issue 27; it was under 2 s
before). Not a test: it prints, so a slow machine never fails CI.

    .venv/bin/python bench/check_scale.py [--hosts N] [--lanes N] [--command-runs N]

Then the same state is committed to a temporary git repo and the real command, `lanes check --repo R
--json` (a process of its own: its imports, the repo read through git, the JSON printed), is timed
`--command-runs` times (3 by default; 0 skips it), wall and CPU seconds.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reconciler.policy import evaluate
from reconciler.spec.load import load_desired, load_policies

REPO = Path(__file__).resolve().parents[1]
DIGEST = "sha256:" + "5e" * 32

MODELS = {
    "gqa-8b": """hf_repo: org/gqa-8b
revision: 0123456789abcdef0123456789abcdef01234567
path: /models/gqa-8b
weight_bytes: 16000000000
architecture:
  layers: 32
  attention: gqa
  num_heads: 32
  kv_heads: 8
  head_dim: 128
""",
}


def lane_yaml(
    hosts: list[str],
    tp: int,
    pp: int,
    model: str,
    *,
    running: bool,
    util: float,
    port: int,
    max_model_len: int,
    served: str,
) -> str:
    return (
        f"desired: {'running' if running else 'stopped'}\n"
        "engine: vllm\n"
        "engine_version: 0.32.0\n"
        f"image: registry.example/vllm@{DIGEST}\n"
        f"model: {model}\n"
        f"served_model_name: {served}\n"
        f"hosts: [{', '.join(hosts)}]\n"
        f"tp: {tp}\n"
        f"pp: {pp}\n"
        f"max_model_len: {max_model_len}\n"
        "kv_cache_dtype: fp8\n"
        f"gpu_memory_utilization: {util}\n"
        f"port: {port}\n"
        "args: [--trust-remote-code]\n"
        "env:\n"
        "  VLLM_LOGGING_LEVEL: INFO\n"
    )


def generate(n_hosts: int, n_lanes: int) -> dict[str, bytes]:
    """One lane in five spans four hosts of its own (tp 4, or tp 2 x pp 2) on the first 80% of the
    hosts; the others are single-host lanes packed up to four per remaining host (different ports,
    budgets that fit together)."""
    files: dict[str, bytes] = {"state/fleet.yaml": b"ssh_user: root\n"}
    for i in range(n_hosts):
        files[f"state/hosts/s{i:04d}.yaml"] = (
            f"address: 10.{i // 250}.{i % 250}.1\nhardware: gb10\n"
            f"data_plane: [{{interface: enp1s0f0np0, address: 10.{128 + i // 250}.{i % 250}.1/9}}]\n"
        ).encode()
    for name in ("deepseek-v4.1-flash-1017", "glm-5.3-mxfp4", "minimax-m3.1-flash"):
        files[f"state/models/{name}.yaml"] = (REPO / "state" / "models" / f"{name}.yaml").read_bytes()
    for name, text in MODELS.items():
        files[f"state/models/{name}.yaml"] = text.encode()
    big = ["deepseek-v4.1-flash-1017", "minimax-m3.1-flash", "glm-5.3-mxfp4"]
    multi_hosts = max(4, (n_hosts * 4 // 5) // 4 * 4)
    single_hosts = max(1, n_hosts - multi_hosts)
    single = 0
    for i in range(n_lanes):
        if i % 5 == 0:
            k = (i // 5) % (multi_hosts // 4)
            hosts = [f"s{h:04d}" for h in range(4 * k, 4 * k + 4)]
            tp, pp = (4, 1) if i % 10 == 0 else (2, 2)
            text = lane_yaml(
                hosts,
                tp,
                pp,
                big[(i // 5) % 3],
                running=i % 4 != 3,
                util=0.85,
                port=8000,
                max_model_len=131072,
                served=f"big-{i}",
            )
        else:
            host = multi_hosts + single % single_hosts
            text = lane_yaml(
                [f"s{host:04d}"],
                1,
                1,
                "gqa-8b",
                running=True,
                util=0.2,
                port=8000 + single // single_hosts,
                max_model_len=16384,
                served=f"small-{i}",
            )
            single += 1
        files[f"state/lanes/lane-{i:04d}.yaml"] = text.encode()
    for path in sorted((REPO / "policies").glob("*.yaml")):
        files[f"policies/{path.name}"] = path.read_bytes()
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--command-runs", type=int, default=3, help="times to run the real command (0: none)")
    parser.add_argument("--lanes", type=int, default=1000)
    args = parser.parse_args()
    files = generate(args.hosts, args.lanes)
    marks = [(time.perf_counter(), time.process_time())]
    desired = load_desired(files, "bench")
    marks.append((time.perf_counter(), time.process_time()))
    policies = load_policies(files)
    marks.append((time.perf_counter(), time.process_time()))
    verdict = evaluate(desired, policies)
    marks.append((time.perf_counter(), time.process_time()))
    denies = sum(1 for v in verdict.violations if v.severity == "deny")
    by_rule: dict[str, int] = {}
    for v in verdict.violations:
        by_rule[f"{v.rule}/{v.severity}"] = by_rule.get(f"{v.rule}/{v.severity}", 0) + 1

    def took(a: int, b: int) -> str:
        return f"{marks[b][0] - marks[a][0]:8.3f} s  (CPU {marks[b][1] - marks[a][1]:6.3f} s)"

    print(f"state: {len(desired.hosts)} hosts, {len(desired.lanes)} lanes, {len(files)} files")
    print(f"load_desired   {took(0, 1)}")
    print(f"load_policies  {took(1, 2)}")
    print(
        f"evaluate       {took(2, 3)}   ({len(verdict.budgets)} rank budgets, "
        f"{len(verdict.violations)} violations, {denies} deny)"
    )
    print(f"               findings by rule: {dict(sorted(by_rule.items()))}")
    total = marks[3][0] - marks[0][0]
    print(f"total          {took(0, 3)}   goal <= 1.0 s: {'met' if total <= 1.0 else 'NOT met'}")
    print(f"load average   {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.command_runs:
        time_command(files, args.command_runs)


def time_command(files: dict[str, bytes], runs: int) -> None:
    """`lanes check --json` on the state committed to a temporary repo: wall and CPU seconds per run."""
    lanes = Path(sys.executable).parent / "lanes"
    with tempfile.TemporaryDirectory(prefix="lanes-check-scale-") as tmp:
        repo = Path(tmp) / "repo"
        for name, data in files.items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_bytes(data)
        git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", "state"], check=True)
        for i in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run(
                [str(lanes), "check", "--repo", str(repo), "--json"], check=False, capture_output=True, cwd=tmp
            )
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            print(
                f"lanes check --json, run {i + 1}: {wall:6.3f} s  (CPU {cpu:6.3f} s; exit {done.returncode}, "
                f"{len(done.stdout):,} bytes)   goal <= 1.0 s: {'met' if wall <= 1.0 else 'NOT met'}"
            )
        print(f"load average   {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
