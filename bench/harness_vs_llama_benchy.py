"""`lanes bench` side by side with llama-benchy against the same stand-in, offline.

llama-benchy (PyPI `llama-benchy`) is the Spark community's reference; a
figure from `lanes bench` should mean what the same figure from llama-benchy
means. This script runs both against one engine stand-in on 127.0.0.1 with
the same grid and prints, per metric and concurrency, both means and their
ratio, next to the stand-in's configured pacing.

Offline, by construction:
- llama-benchy is installed with pip into its own virtualenv (default
  ~/.cache/lanes/llama-benchy-venv, `--venv`), never into the project's;
- its tokenizer is built here with the `tokenizers` package: a word-level
  vocabulary with whitespace splitting, which counts exactly as the stand-in
  does (one token per whitespace-separated word), so its prompt adaptation
  is exact;
- its corpus (by default a Project Gutenberg book it downloads) is a text
  generated here and placed in llama-benchy's own download cache under a
  private HOME, so nothing is fetched; HF_HUB_OFFLINE is set as well.
If llama-benchy cannot be installed or run, the script says exactly why.

Both tools use /v1/chat/completions (llama-benchy only speaks chat) and the
"generation" latency mode. The stand-in sends the chat role chunk with the
first token, as vLLM does: otherwise llama-benchy's time to first response
would be ~0 and its prompt figures meaningless.

    .venv/bin/python bench/harness_vs_llama_benchy.py [--pp 512] [--tg 64] [--concurrency 1 4] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reconciler.bench import prompts  # noqa: E402
from reconciler.bench.runner import run_profile  # noqa: E402
from reconciler.spec.bench import BenchProfile  # noqa: E402

PACKAGE = "llama-benchy"
BOOK_URL = "https://offline.invalid/lanes-bench/book.txt"  # never fetched: the cache has it
MODEL = "bench-model"
METRICS = (
    "pp_req_throughput",
    "pp_throughput",
    "tg_req_throughput",
    "tg_throughput",
    "ttfr",
    "est_ppt",
    "e2e_ttft",
)
TOKENIZER_BUILDER = """
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers
words = json.load(open(sys.argv[1]))
vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.save(sys.argv[2])
"""


class CannotRunError(Exception):
    """llama-benchy cannot run here; the message says why."""


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def ensure_llama_benchy(venv: Path) -> Path:
    exe = venv / "bin" / "llama-benchy"
    python = venv / "bin" / "python"
    if exe.exists() and python.exists():
        return venv
    print(f"installing {PACKAGE} and tokenizers into {venv} (its own virtualenv, not the project's) ...")
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        raise CannotRunError(f"`python -m venv {venv}` failed:\n{tail(made.stderr)}")
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", PACKAGE, "tokenizers"],
        capture_output=True,
        text=True,
        check=False,
    )
    if pip.returncode != 0 or not exe.exists():
        raise CannotRunError(
            f"`pip install {PACKAGE} tokenizers` failed (exit {pip.returncode}); the package index is "
            f"the only source and it did not deliver:\n{tail(pip.stderr or pip.stdout)}"
        )
    return venv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_standin(port: int, pp_tps: float, tg_tps: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STANDIN_PP_TPS": str(pp_tps), "STANDIN_TG_TPS": str(tg_tps)}
    argv = [sys.executable, "-m", "reconciler.sim.standin", "--bind", "127.0.0.1", "--"]
    argv += ["vllm", "serve", f"/models/{MODEL}", "--port", str(port), "--served-model-name", MODEL]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.terminate()
    raise SystemExit("the stand-in did not start")


def prepare_offline_inputs(venv: Path, work: Path) -> tuple[Path, Path]:
    """A tokenizer.json and a HOME whose llama-benchy cache already holds the corpus."""
    words = prompts.words(20261023, "llama-benchy-corpus", 200_000)
    lines = [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)]
    home = work / "home"
    cache = home / ".cache" / "llama-benchy"
    cache.mkdir(parents=True)
    # llama-benchy looks in its cache (md5 of the book URL) before it downloads anything.
    name = hashlib.md5(BOOK_URL.encode(), usedforsecurity=False).hexdigest()
    (cache / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    vocab_file = work / "vocab.json"
    vocab_file.write_text(json.dumps(sorted(set(prompts.VOCABULARY))), encoding="utf-8")
    tokenizer = work / "tokenizer.json"
    built = subprocess.run(
        [str(venv / "bin" / "python"), "-c", TOKENIZER_BUILDER, str(vocab_file), str(tokenizer)],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise CannotRunError(f"building a word-level tokenizer with `tokenizers` failed:\n{tail(built.stderr)}")
    return tokenizer, home


def run_llama_benchy(venv: Path, url: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    tokenizer, home = prepare_offline_inputs(venv, work)
    out = work / "llama-benchy.json"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    argv = [str(venv / "bin" / "llama-benchy"), "--base-url", f"{url}/v1", "--model", MODEL]
    argv += ["--tokenizer", str(tokenizer), "--book-url", BOOK_URL, "--latency-mode", "generation"]
    argv += ["--pp", str(args.pp), "--tg", str(args.tg), "--depth", str(args.depth), "--runs", str(args.runs)]
    argv += ["--concurrency", *map(str, args.concurrency), "--skip-coherence", "--exact-tg"]
    argv += ["--format", "json", "--save-result", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)
    if done.returncode != 0 or not out.exists():
        raise CannotRunError(
            f"llama-benchy exited {done.returncode}:\n{tail(done.stdout, 8)}\n{tail(done.stderr)}".rstrip()
        )
    if "Downloading" in done.stdout:
        raise CannotRunError("llama-benchy tried to download its corpus despite the primed cache")
    result: dict[str, Any] = json.loads(out.read_text())
    result["_log"] = done.stdout
    return result


def rows_by_key(rows: list[dict[str, Any]]) -> dict[tuple[int, int, int, int], dict[str, Any]]:
    out = {}
    for r in rows:
        if r.get("is_context_prefill_phase"):
            continue
        out[(r["prompt_size"], r["response_size"], r["context_size"], r["concurrency"])] = r
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pp", type=int, default=512)
    parser.add_argument("--tg", type=int, default=64)
    parser.add_argument("--depth", type=int, default=0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pp-tps", type=float, default=500.0)
    parser.add_argument("--tg-tps", type=float, default=100.0)
    parser.add_argument("--venv", type=Path, default=Path.home() / ".cache" / "lanes" / "llama-benchy-venv")
    args = parser.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    work = Path(tempfile.mkdtemp(prefix="lanes-vs-benchy-"))
    proc = start_standin(port, args.pp_tps, args.tg_tps)
    try:
        try:
            venv = ensure_llama_benchy(args.venv)
            theirs = run_llama_benchy(venv, url, args, work)
        except CannotRunError as exc:
            print(f"llama-benchy cannot run offline here: {exc}")
            return 2
        profile = BenchProfile(
            name="vs-llama-benchy",
            pp=(args.pp,),
            tg=(args.tg,),
            depth=(args.depth,),
            concurrency=tuple(args.concurrency),
            repetitions=args.runs,
            warmup=1,
            api="chat",
            latency_mode="generation",
        )
        ours = asyncio.run(run_profile(profile, url=url, model=MODEL))
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"stand-in STANDIN_PP_TPS={args.pp_tps:g} STANDIN_TG_TPS={args.tg_tps:g}; pp{args.pp} tg{args.tg} "
        f"depth {args.depth}; {args.runs} runs; /v1/chat/completions; latency mode generation"
    )
    print(
        f"llama-benchy {theirs.get('version')}: latency {theirs.get('latency_ms', 0):.2f} ms; "
        f"lanes bench: latency {ours.latency_s * 1000:.2f} ms (minimum of 5 probes; llama-benchy: mean of 3)"
    )
    print(f"{'c':>2}  {'metric':<18} {'configured':>10} {'lanes bench':>18} {'llama-benchy':>18} {'ratio':>7}")
    mine, others = rows_by_key(ours.rows), rows_by_key(theirs["benchmarks"])
    worst = 0.0
    for key, row in sorted(mine.items(), key=lambda kv: kv[0][3]):
        other = others.get(key)
        c = key[3]
        for name in METRICS:
            a, b = row.get(name), (other or {}).get(name)
            configured = {
                "pp_req_throughput": args.pp_tps,
                "tg_req_throughput": args.tg_tps,
                "pp_throughput": args.pp_tps * c,
                "tg_throughput": args.tg_tps * c,
            }.get(name)
            conf = f"{configured:.1f}" if configured else ""
            show_a = f"{a['mean']:.2f} ± {a['std']:.2f}" if a else "-"
            show_b = f"{b['mean']:.2f} ± {b['std']:.2f}" if b else "-"
            ratio = a["mean"] / b["mean"] if a and b and b["mean"] else None
            if ratio is not None and name.endswith("throughput"):
                worst = max(worst, abs(ratio - 1))
            print(f"{c:>2}  {name:<18} {conf:>10} {show_a:>18} {show_b:>18} {ratio if ratio else 0:>7.4f}")
    print(f"largest throughput disagreement: {worst:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
