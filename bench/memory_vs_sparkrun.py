"""lanes' per-rank memory figures next to sparkrun's estimate, for real model configurations.

Every config.json under tests/fixtures/model-configs/ (recorded verbatim,
its source in the sidecar source.yaml) is turned into a model file by the
same code as `lanes model describe` (reconciler.spec.checkpoint), served by
a stopped vLLM lane on four Sparks of the example fleet, and evaluated by
the live policy engine (`lanes check`'s evaluate). Its rank-0 figures are
printed next to sparkrun's for the same config, weights and topology
(bench/sparkrun_formula.py restates sparkrun's formula and cites it).

KV per token is the marginal cost per token at the context: (KV at L -
KV at L/2) / (L/2), so sliding-window caches, which stop growing at the
window, and recurrent states, which never grow, are not spread over it.

    .venv/bin/python bench/memory_vs_sparkrun.py [--context 131072] [--tp 4] [--markdown]
    .venv/bin/python bench/memory_vs_sparkrun.py --fleet [--markdown]   # the example fleet's verdicts
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sparkrun_formula as sparkrun  # bench/sparkrun_formula.py, next to this script
from benchstate import fleet_without_gateway  # bench/benchstate.py
from ruamel.yaml import YAML

from reconciler.policy import evaluate
from reconciler.spec.checkpoint import model_from_checkpoint, render_model_yaml
from reconciler.spec.load import load_desired, load_policies

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "model-configs"
GIB = 1 << 30
DIGEST = "sha256:" + "5e" * 32
HOSTS = ("dgx1", "dgx2", "dgx3", "dgx4", "dgx5", "dgx6", "dgx7")
UTILIZATION = 0.80
EXTRA_DTYPES = {"deepseek-v3.2": "fp8_ds_mla", "deepseek-v4-flash": "fp8_ds_mla"}
"""Configurations shown a second time with the packed layout vLLM serves them with."""


@dataclass(frozen=True)
class Case:
    slug: str
    config: dict[str, Any]
    weight_bytes: int
    exact: bool
    kind: str
    kv_dtype: str


def cases() -> list[Case]:
    yaml = YAML(typ="safe")
    out = []
    for folder in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        config = json.loads((folder / "config.json").read_text())
        source = yaml.load((folder / "source.yaml").read_text())
        base = (folder.name, config, int(source["weight_bytes"]), bool(source["weight_bytes_exact"]), source["kind"])
        out.append(Case(*base, "auto"))
        if folder.name in EXTRA_DTYPES:
            out.append(Case(*base, EXTRA_DTYPES[folder.name]))
    return out


def lane_name(case: Case, length: int) -> str:
    return f"{case.slug.replace('.', '-')}-{case.kv_dtype.replace('_', '-')}-{length}"


def lane_yaml(case: Case, tp: int, length: int, port: int) -> str:
    return (
        "desired: stopped\nengine: vllm\nengine_version: 0.32.0\n"
        f"image: registry.example/vllm@{DIGEST}\nmodel: {case.slug.replace('.', '-')}\n"
        f"hosts: [{', '.join(HOSTS[:tp])}]\ntp: {tp}\nmax_model_len: {length}\n"
        f"kv_cache_dtype: {case.kv_dtype}\ngpu_memory_utilization: {UTILIZATION}\nport: {port}\n"
    )


def repo_files() -> dict[str, bytes]:
    files = {}
    for folder in ("policies", "state/hosts"):
        for path in (REPO / folder).rglob("*"):
            if path.is_file():
                files[path.relative_to(REPO).as_posix()] = path.read_bytes()
    # The fleet's gateway routes the example's lanes, which these repos do not hold.
    files["state/fleet.yaml"] = fleet_without_gateway((REPO / "state" / "fleet.yaml").read_text()).encode()
    return files


def lanes_figures(all_cases: list[Case], tp: int, context: int) -> dict[tuple[str, str], dict[str, float]]:
    """Rank-0 figures of every case, from the live policy engine."""
    files = repo_files()
    port = 9000
    for case in all_cases:
        slug = case.slug.replace(".", "-")
        index = {"metadata": {"total_size": case.weight_bytes}}
        spec, notes = model_from_checkpoint(
            case.config, index, name=slug, path=f"/models/{slug}", file_bytes_total=None,
            hf_repo=f"fixture/{slug}", revision="0" * 40,
        )  # fmt: skip
        files[f"state/models/{slug}.yaml"] = render_model_yaml(spec, notes).encode()
        for length in (context, context // 2):
            port += 1
            files[f"state/lanes/{lane_name(case, length)}.yaml"] = lane_yaml(case, tp, length, port).encode()
    verdict = evaluate(load_desired(files, "bench"), load_policies(files))
    rank0 = {b.lane: b for b in verdict.budgets if b.rank == 0}
    out = {}
    for case in all_cases:
        full, half = rank0[lane_name(case, context)], rank0[lane_name(case, context // 2)]
        out[(case.slug, case.kv_dtype)] = {
            "weights": full.weights,
            "kv_per_token": (full.kv_min - half.kv_min) / (context - context // 2),
            "kv": full.kv_min,
            "overhead": full.overhead,
            "need": full.need,
            "budget": full.budget,
        }
    return out


def table(tp: int, context: int) -> list[dict[str, Any]]:
    all_cases = cases()
    ours = lanes_figures(all_cases, tp, context)
    rows = []
    for case in all_cases:
        theirs = sparkrun.estimate(case.config, case.weight_bytes, tp=tp, pp=1, kv_dtype=case.kv_dtype,
                                   max_model_len=context)  # fmt: skip
        lanes = ours[(case.slug, case.kv_dtype)]
        rows.append({"case": case, "lanes": lanes, "sparkrun": theirs})
    return rows


def _gib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / GIB:.2f}"


def _b(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def render(rows: list[dict[str, Any]], tp: int, context: int, markdown: bool) -> str:
    head = (
        f"tp {tp}, pp 1, {context:,} tokens, vLLM gpu_memory_utilization {UTILIZATION}; per rank (rank 0); "
        "GiB except KV/token (bytes). lanes need = weights + KV + overhead; sparkrun need = weights + KV."
    )
    cols = ["model", "kind", "KV dtype", "weights", "KV B/token lanes", "KV B/token sparkrun",
            f"KV @{context // 1024}K lanes", f"KV @{context // 1024}K sparkrun", "need lanes", "need sparkrun",
            "sparkrun notes"]  # fmt: skip
    lines = [head, ""]
    if markdown:
        lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        case, ours, theirs = row["case"], row["lanes"], row["sparkrun"]
        weights = _gib(ours["weights"]) + ("" if case.exact else " (est.)")
        if abs(ours["weights"] - theirs.weights) > 1:
            weights += f" / {_gib(theirs.weights)}"
        cells = [case.slug, case.kind, case.kv_dtype, weights, _b(ours["kv_per_token"]), _b(theirs.kv_per_token),
                 _gib(ours["kv"]), _gib(theirs.kv_total), _gib(ours["need"]), _gib(theirs.need),
                 "; ".join(theirs.notes) or "-"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |" if markdown else "  ".join(cells))
    return "\n".join(lines)


def fleet(markdown: bool) -> str:
    """The example fleet in state/, as `lanes check` judges it: each lane's tightest rank and its findings."""
    files = repo_files()
    for path in (REPO / "state").rglob("*.yaml"):
        files[path.relative_to(REPO).as_posix()] = path.read_bytes()
    desired = load_desired(files, "example")
    verdict = evaluate(desired, load_policies(files))
    cols = ["lane", "state", "engine, shape", "weights", "KV", "overhead", "need", "budget", "headroom", "pool",
            "findings"]  # fmt: skip
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] if markdown else ["  ".join(cols)]
    for name, lane in sorted(desired.lanes.items()):
        worst = min(verdict.lane_budgets(name), key=lambda b: b.headroom)
        found = sorted({f"{v.severity} {v.rule}" for v in verdict.lane_violations(name)})
        shape = f"{lane.engine}, tp {lane.tp} x pp {lane.pp}, {lane.max_model_len:,} tokens"
        shape += f", {worst.flag} {worst.utilization}"
        inside = "" if worst.overhead_inside else " (outside)"
        cells = [name, lane.desired, shape, _gib(worst.weights), _gib(worst.kv_min), _gib(worst.overhead) + inside,
                 _gib(worst.need), _gib(worst.budget), _gib(worst.headroom), _gib(worst.pool),
                 ", ".join(found) or "none"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |" if markdown else "  ".join(cells))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=131072)
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--fleet", action="store_true", help="the example fleet's verdicts instead")
    args = parser.parse_args()
    if args.fleet:
        print(fleet(args.markdown))
        return
    print(render(table(args.tp, args.context), args.tp, args.context, args.markdown))


if __name__ == "__main__":
    main()
