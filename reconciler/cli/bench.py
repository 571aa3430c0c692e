"""`lanes bench LANE`: measure a lane's endpoint and print (and keep) the evidence.

Reads the lane and its bench profile from a commit (default HEAD), drives
the lane's OpenAI-compatible endpoint (the head host's address and the
lane's port, or `--url`), shows a progress bar on stderr, and prints a
llama-benchy style table (or the evidence JSON with `--json`). `--out FILE`
writes the evidence and its SVG chart beside it; `--baseline FILE` compares
with an earlier evidence file. Exit 0 fine, 1 a throughput regression
beyond noise against the baseline, 5 an endpoint that does not answer usably, 2 bad input.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from reconciler.bench import chart, evidence
from reconciler.bench.metrics import row_key
from reconciler.bench.rates import BASIS_WORDS
from reconciler.bench.runner import Progress as BenchProgress
from reconciler.bench.service import benchmark_lane
from reconciler.cli import exitcodes
from reconciler.cli.common import EXIT_DENY, EXIT_OK, err_console, fail, handle_errors
from reconciler.cli.tables import Cell, Column, print_table
from reconciler.errors import InputError, LanesError
from reconciler.source.gitread import open_repo, read_commit
from reconciler.spec.load import load_desired


def _read_baseline(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read baseline: {exc.strerror}", file=str(path), field="--baseline") from None
    return evidence.loads(text, str(path))


def _fmt(metric: Any, digits: int = 2) -> str:
    if not isinstance(metric, Mapping):
        return ""
    return f"{metric['mean']:.{digits}f} ± {metric['std']:.{digits}f}"


def _change(comparison: Mapping[str, Any] | None, row: Mapping[str, Any], metric: str) -> Text:
    if not comparison:
        return Text("")
    key = row_key(row)
    for m in comparison["metrics"]:
        if m["metric"] == metric and evidence.comparison_key(m) == key:
            change = f"{m['relative']:+.1%}" if m["relative"] is not None else f"{m['delta']:+.3g}"
            return Text(change, style={"worse": "red", "better": "green"}.get(m["verdict"], ""))
    return Text("")


def render_table(ev: Mapping[str, Any], console: Console) -> None:
    """llama-benchy's table: a pp row and a tg row per grid point (times in ms), and tg counted in chunks.

    The tg row counts what `tg_basis` says and is named so, `tg128 (usage tokens)`;
    `tg128 (stream chunks)` follows it when the two can differ. Context loads of the
    prefix-cached mode are llama-benchy's `ctx_pp` and `ctx_tg` rows.
    """
    comparison = ev.get("comparison")
    basis = evidence.tg_basis(ev)
    title = (
        f"{ev['lane']} at {str(ev['commit'])[:12]} · {ev['model']} · latency {ev['latency_ms']:.1f} ms"
        f" · tg counts {BASIS_WORDS[basis]}"
    )
    rows: list[list[Cell]] = []
    headers = (
        "test",
        "c",
        "t/s (total)",
        "t/s (req)",
        "peak t/s",
        "peak t/s (req)",
        "ttfr ms",
        "est_ppt ms",
        "e2e_ttft ms",
        "itl ms",
        "vs baseline",
    )
    columns = [Column(h, "key" if h == "test" else "num") for h in headers]
    for row in ev["benchmarks"]:
        depth = f" @ d{row['context_size']}" if row["context_size"] else ""
        pp_name, tg_name = (
            ("ctx_pp", "ctx_tg")
            if row.get("is_context_prefill_phase")
            else (f"pp{row['prompt_size']}", f"tg{row['response_size']}")
        )
        c = str(row["concurrency"])
        rows.append(
            [
                f"{pp_name}{depth}",
                c,
                _fmt(row.get("pp_throughput")),
                _fmt(row.get("pp_req_throughput")),
                "",
                "",
                _fmt(row.get("ttfr")),
                _fmt(row.get("est_ppt")),
                _fmt(row.get("e2e_ttft")),
                "",
                _change(comparison, row, "pp_throughput"),
            ]
        )
        rows.append(
            [
                f"{tg_name}{depth} ({BASIS_WORDS[basis]})",
                c,
                _fmt(row.get("tg_throughput")),
                _fmt(row.get("tg_req_throughput")),
                _fmt(row.get("peak_throughput")),
                _fmt(row.get("peak_req_throughput")),
                "",
                "",
                "",
                _fmt(row.get("itl")),
                _change(comparison, row, "tg_throughput"),
            ]
        )
        if basis != "stream_chunks" and row.get("tg_throughput_chunks") is not None:
            rows.append(
                [
                    f"{tg_name}{depth} ({BASIS_WORDS['stream_chunks']})",
                    c,
                    _fmt(row.get("tg_throughput_chunks")),
                    _fmt(row.get("tg_req_throughput_chunks")),
                    _fmt(row.get("peak_throughput_chunks")),
                    _fmt(row.get("peak_req_throughput_chunks")),
                    "",
                    "",
                    "",
                    "",
                    _change(comparison, row, "tg_throughput_chunks"),
                ]
            )
    print_table(console, columns, rows, title=title)
    errors = sum(int(row.get("errors", 0)) for row in ev["benchmarks"])
    if errors:
        console.print(f"[yellow]{errors} request(s) failed and are left out of the figures[/]")
    if comparison:
        base = comparison["baseline"]
        against = f"baseline {str(base.get('commit') or '?')[:12]} ({base.get('time') or '?'})"
        bases = comparison.get("tg_basis") or {}
        if bases and bases.get("current") != bases.get("baseline"):
            then = BASIS_WORDS[evidence.tg_basis({"tg_basis": bases.get("baseline")})]
            console.print(
                f"[yellow]the baseline's tg counts {then}, this run's {BASIS_WORDS[basis]}: "
                "tg, peak and itl are not compared[/]"
            )
        if comparison["regression"]:
            console.print(f"[bold red]REGRESSION[/] against {against}: " + "; ".join(comparison["regressions"]))
        else:
            console.print(f"[green]no throughput regression beyond noise[/] against {against}")


@handle_errors
def bench_cmd(
    lane: Annotated[str, typer.Argument(help="the lane to benchmark")],
    repo: Annotated[str, typer.Option("--repo", help="path of the state repository")] = ".",
    rev: Annotated[str, typer.Option("--rev", help="commit, branch or tag the lane is read from")] = "HEAD",
    state_dir: Annotated[str, typer.Option(help="folder of the state files in the repo")] = "state",
    profile: Annotated[
        str | None, typer.Option("--profile", help="profile in bench-profiles.yaml (default: the lane's, else default)")
    ] = None,
    url: Annotated[
        str | None, typer.Option("--url", help="endpoint root (default: http://<head host address>:<lane port>)")
    ] = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", help="earlier evidence JSON to compare with")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="write the evidence JSON here, the chart beside it")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the evidence JSON instead of a table")] = False,
) -> None:
    """Benchmark a lane (pp, tg, TTFT, ITL); exit 1 on a throughput regression against --baseline.

    Exit 5 when the endpoint does not answer usably (nothing measured), 2 bad input.
    """
    read = read_commit(open_repo(repo), rev, (state_dir,))
    desired = load_desired(read.files, read.commit, state_dir=state_dir)
    base = _read_baseline(baseline) if baseline is not None else None

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console(),
        transient=True,
    ) as bar:
        task = bar.add_task(f"bench {lane}", total=None)

        def show(p: BenchProgress) -> None:
            bar.update(task, completed=p.done, total=p.total, description=f"bench {lane}: {p.label}")

        try:
            ev = asyncio.run(benchmark_lane(desired, lane, profile=profile, url=url, baseline=base, progress=show))
        except InputError:
            raise
        except LanesError as exc:
            # The endpoint did not answer usably: no figure was measured, which is not a regression.
            bar.stop()
            fail(f"{lane}: endpoint unusable: {exc}", exitcodes.UNAVAILABLE, as_json=as_json)

    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(evidence.dumps(ev), encoding="utf-8")
        out.with_suffix(".svg").write_text(chart.render_svg(ev, base), encoding="utf-8")
    if as_json:
        # The evidence document with the command's outcome beside it (the file written keeps its own shape).
        code = EXIT_DENY if ev["regression"] else EXIT_OK
        print(json.dumps({"ok": code == EXIT_OK, "exit_code": code, **ev}, indent=2))
    else:
        console = Console()
        render_table(ev, console)
        if out is not None:
            console.print(f"evidence: {out}  chart: {out.with_suffix('.svg')}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_DENY if ev["regression"] else EXIT_OK)
