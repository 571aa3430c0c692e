"""`lanes bench` against a real engine stand-in process: the client counts what the engine sent.

The stand-in keeps a ledger of every completion it served (prompt tokens it
counted, content chunks and tokens it sent, whether a usage chunk went out;
`GET /standin/requests`). These tests compare what the bench client recorded
and what the evidence says with that ledger, and check that the recorded
times are in the order a stream makes them. No figure of speed is asserted
here: on a loaded machine a process can stall for tens of milliseconds, and
a test that fails at random refuses good changes. The figures themselves
are exact on a fake clock (`test_pacing_fake_clock.py`); how close the
client comes on a real clock is printed by `bench/harness_accuracy.py`.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any, Literal

import httpx
import pytest

from reconciler.bench import evidence
from reconciler.bench.client import BenchClient, RequestRecord
from reconciler.bench.evidence import LaneIdentity, build_evidence
from reconciler.bench.prompts import Prompt
from reconciler.bench.runner import BenchRun, Progress, run_profile
from reconciler.spec.bench import BenchProfile

from .conftest import MODEL, ServeEngine, StartStandin

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

# Prefill of a whole prompt takes long next to the one-token probe whose time is subtracted from it,
# so the estimated prompt time is never zero (no figure goes missing); the pacing is not measured.
PP_TPS = 1000.0
TG_TPS = 1000.0
PROFILE = BenchProfile(
    name="ledger", pp=(128, 512), tg=(16, 64), concurrency=(1, 4), repetitions=2, warmup=1, latency_mode="generation"
)
IDENTITY = LaneIdentity(
    lane="bench-lane",
    commit="c0ffee" + "0" * 34,
    engine="vllm",
    engine_version="0.32.0",
    image="vllm/vllm-openai@sha256:" + "ab" * 32,
    hosts=("dgx5", "dgx6"),
)
PER_METRIC = ("mean", "std", "values")
LEDGER = "/standin/requests"


def ledger(url: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = httpx.get(url + LEDGER, timeout=30).json()["requests"]
    return entries


def _last_seq(url: str) -> int:
    entries = ledger(url)
    return int(entries[-1]["seq"]) if entries else 0


class Baseline:
    def __init__(self, run: BenchRun, progress: list[Progress], served: list[dict[str, Any]]) -> None:
        self.run = run
        self.progress = progress
        self.served = served
        """The stand-in's ledger entries of this run, in the order it served them."""


@pytest.fixture(scope="module")
def standin_url(start_standin: StartStandin) -> str:
    return start_standin(STANDIN_PP_TPS=str(PP_TPS), STANDIN_TG_TPS=str(TG_TPS))


@pytest.fixture(scope="module")
def baseline(standin_url: str) -> Baseline:
    before = _last_seq(standin_url)
    seen: list[Progress] = []
    run = asyncio.run(run_profile(PROFILE, url=standin_url, model=MODEL, progress=seen.append))
    return Baseline(run, seen, [e for e in ledger(standin_url) if e["seq"] > before])


def _measured(run: BenchRun) -> list[tuple[Any, RequestRecord]]:
    return [(shape, r) for shape, batches in run.records.items() for batch in batches for r in batch]


def test_every_grid_request_the_client_counted_is_what_the_stand_in_sent(baseline: Baseline) -> None:
    grid = [e for e in baseline.served if e["max_tokens"] > 1]  # sizing and latency probes ask for one token
    assert all(e["stream"] and e["usage_chunk"] and e["api"] == "completions" for e in grid)
    # The stand-in sent what was asked for: one chunk per token, each counted in the usage.
    assert all(e["content_chunks"] == e["completion_tokens"] == e["max_tokens"] for e in grid)
    sent = Counter((e["prompt_tokens"], e["completion_tokens"], e["content_chunks"]) for e in grid)
    counted = Counter((r.prompt_tokens, r.completion_tokens, len(r.chunk_times)) for _, r in _measured(baseline.run))
    # Every measured request is one the stand-in served, and what is left over is the warmup, nothing else.
    warmups: Counter[tuple[int, int, int]] = Counter()
    for shape in baseline.run.records:
        warmups[(shape.pp, shape.tg, shape.tg)] += shape.concurrency * PROFILE.warmup
    assert counted + warmups == sent
    assert {(s.pp, s.tg, s.concurrency) for s in baseline.run.records} == {
        (pp, tg, c) for pp in PROFILE.pp for tg in PROFILE.tg for c in PROFILE.concurrency
    }
    for shape, record in _measured(baseline.run):
        assert record.error is None
        assert (record.prompt_tokens, record.completion_tokens) == (shape.pp, shape.tg)
        assert record.chunk_tokens == [1] * shape.tg  # no token_ids in the chunks: one token each


def test_rows_report_the_counts_the_stand_in_sent(baseline: Baseline) -> None:
    for row in baseline.run.rows:
        n = row["concurrency"] * PROFILE.repetitions
        assert (row["requests"], row["errors"]) == (n, 0)
        assert row["prompt_tokens"]["values"] == [float(row["prompt_size"])] * n
        assert row["completion_tokens"]["values"] == [float(row["response_size"])] * n
        for metric in ("pp_req_throughput", "tg_req_throughput", "e2e_ttft", "itl", "e2e_latency"):
            assert len(row[metric]["values"]) == n and min(row[metric]["values"]) > 0, metric


def test_prompts_have_the_size_the_server_counts(baseline: Baseline) -> None:
    run = baseline.run
    # The stand-in counts whitespace-separated words: one word is one token, nothing added.
    assert run.fit.per_word == pytest.approx(1.0) and run.fit.fixed == pytest.approx(0.0, abs=1e-6)
    assert run.sized_tokens == {(pp, 0): pp for pp in PROFILE.pp}
    one_token = [e["prompt_tokens"] for e in baseline.served if e["max_tokens"] == 1]
    assert one_token[:2] == [16, 256]  # the two calibration probes, as the stand-in counted them
    for pp in PROFILE.pp:
        assert pp in one_token  # the sizing request the stand-in counted as exactly pp tokens


def test_recorded_times_are_in_stream_order(baseline: Baseline) -> None:
    run = baseline.run
    assert run.latency_s > 0
    for _, r in _measured(run):
        assert r.t_first_response is not None and r.t_first_token is not None and r.t_last_token is not None
        assert r.t_send <= r.t_first_response <= r.t_first_token <= r.t_last_token <= r.t_end
        assert r.chunk_times == sorted(r.chunk_times)


async def test_one_request_of_each_api_is_counted_as_sent(standin_url: str) -> None:
    prompt = Prompt(context="some context words", prompt="and the question asked", expected_tokens=7)
    apis: tuple[tuple[Literal["completions", "chat"], int], ...] = (("completions", 0), ("chat", 1))
    for api, role_chunks in apis:
        before = _last_seq(standin_url)
        async with BenchClient(standin_url, MODEL, api=api) as client:
            record = await client.stream(prompt, 9)
        (entry,) = [e for e in ledger(standin_url) if e["seq"] > before]
        assert (entry["api"], entry["role_chunks"], entry["usage_chunk"]) == (api, role_chunks, True)
        assert record.prompt_tokens == entry["prompt_tokens"]
        assert record.completion_tokens == entry["completion_tokens"] == 9
        # A chat role chunk is a first response but not a token.
        assert len(record.chunk_times) == entry["content_chunks"] == 9
        assert record.t_first_response is not None and record.t_first_token is not None
        assert record.t_first_response <= record.t_first_token


def test_progress_is_reported_to_the_end(baseline: Baseline) -> None:
    seen = baseline.progress
    assert seen and seen[-1].done == seen[-1].total
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    assert any("warmup" in p.label for p in seen) and any("latency" in p.label for p in seen)


def test_evidence_keeps_llama_benchys_shape_and_says_what_was_measured(baseline: Baseline) -> None:
    ev = json.loads(evidence.dumps(build_evidence(baseline.run, IDENTITY)))  # survives JSON as is
    for key in ("version", "timestamp", "latency_mode", "latency_ms", "model", "prefix_caching_enabled"):
        assert key in ev
    assert ev["max_concurrency"] == 4 and ev["model"] == MODEL
    assert ev["lane"] == "bench-lane" and ev["commit"] == IDENTITY.commit
    assert ev["engine"] == "vllm" and ev["engine_version"] == "0.32.0"
    assert ev["image_digest"] == "sha256:" + "ab" * 32 and ev["hosts"] == ["dgx5", "dgx6"]
    assert ev["engine_reported_version"] == "0.0.0+standin"
    assert ev["comparison"] is None and ev["regression"] is False
    shapes = {(pp, tg, 0) for pp in PROFILE.pp for tg in PROFILE.tg}
    assert len(ev["benchmarks"]) == len(shapes) * len(PROFILE.concurrency)
    for row in ev["benchmarks"]:
        assert {"concurrency", "prompt_size", "response_size", "context_size"} <= set(row)
        assert (row["prompt_size"], row["response_size"], row["context_size"]) in shapes
        for metric in ("pp_throughput", "pp_req_throughput", "tg_throughput", "tg_req_throughput", "ttfr"):
            assert set(row[metric]) == set(PER_METRIC)
            assert len(row[metric]["values"]) >= PROFILE.repetitions
        for metric in ("est_ppt", "e2e_ttft", "itl", "e2e_latency"):
            assert len(row[metric]["values"]) == row["concurrency"] * PROFILE.repetitions
    assert evidence.loads(evidence.dumps(ev)) == ev
    assert evidence.headline(ev)["pp"].startswith("pp128 ") and evidence.headline(ev)["tg"].startswith("tg16 ")


# Engines that speculate, as their own flags say (the stand-in reads them from its argv).
MTP_VLLM = ["vllm", "serve", f"/models/{MODEL}", "--served-model-name", MODEL, "--speculative-config.method", "mtp"]
MTP_VLLM += ["--speculative-config.num_speculative_tokens", "3"]
NEXTN_SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", f"/models/{MODEL}"]
NEXTN_SGLANG += ["--served-model-name", MODEL, "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3"]
SPEC_PROFILE = BenchProfile(name="spec", pp=(64,), tg=(32,), concurrency=(1, 2), repetitions=2, warmup=0)


@pytest.mark.parametrize("argv", [MTP_VLLM, NEXTN_SGLANG], ids=["vllm-mtp", "sglang-nextn"])
def test_a_speculative_engine_gives_two_tg_figures_from_one_run(serve_engine: ServeEngine, argv: list[str]) -> None:
    url = serve_engine(argv)
    before = _last_seq(url)
    run = asyncio.run(run_profile(SPEC_PROFILE, url=url, model=MODEL))
    served = {e["id"]: e for e in ledger(url) if e["seq"] > before and e["max_tokens"] == 32}
    # What the engine did: the prefill's one token, then four tokens a chunk (the last chunk three).
    assert {(e["completion_tokens"], e["content_chunks"]) for e in served.values()} == {(32, 9)}
    measured = _measured(run)
    assert len(measured) == 6
    for _, record in measured:
        assert (record.completion_tokens, len(record.chunk_times)) == (32, 9)
    ev = build_evidence(run, IDENTITY)
    assert ev["tg_basis"] == "usage_tokens" and evidence.headline(ev)["tg"].endswith(" t/s (usage tokens)")
    for row in ev["benchmarks"]:
        assert row["tokens_per_chunk"]["values"] == pytest.approx([32 / 9] * len(row["tokens_per_chunk"]["values"]))
        # Over the same span, 31 tokens against at most 8 chunks after the first (fewer if two chunks came in
        # one read): tg counted in chunks reads at most 8/31 of tg counted in tokens, whatever the timing.
        for tokens, chunks in zip(
            row["tg_req_throughput"]["values"], row["tg_req_throughput_chunks"]["values"], strict=True
        ):
            assert chunks <= tokens * 8 / 31 * (1 + 1e-9)


def test_the_prefix_cached_mode_is_served_from_the_engines_cache(serve_engine: ServeEngine) -> None:
    for api in ("completions", "chat"):
        url = serve_engine(["vllm", "serve", f"/models/{MODEL}", "--served-model-name", MODEL])
        profile = BenchProfile(
            name="cached",
            pp=(64,),
            tg=(8,),
            depth=(256,),
            concurrency=(1, 2),
            repetitions=2,
            warmup=0,
            prefix_cached=True,
            api=api,
        )
        before = _last_seq(url)
        run = asyncio.run(run_profile(profile, url=url, model=MODEL))
        grid = [e for e in ledger(url) if e["seq"] > before and e["max_tokens"] == 8]
        loads = [e for e in grid if e["prompt_tokens"] < 256 + 64]
        full = [e for e in grid if e["prompt_tokens"] >= 256 + 64]
        assert len(loads) == len(full) == 6, api
        assert all(e["cached_tokens"] == 0 for e in loads)  # every context is new to the engine
        # Each full request finds its context: whole blocks of 16 of it (the chat turn's "." is no context).
        assert all(e["cached_tokens"] >= 256 - 16 for e in full), full
        ctx_rows = [r for r in run.rows if r["is_context_prefill_phase"]]
        measured = [r for r in run.rows if not r["is_context_prefill_phase"]]
        assert len(ctx_rows) == len(measured) == 2
        for row in measured:
            # pp counts what followed the context, as the server counted both requests.
            assert row["prompt_tokens"]["values"] == pytest.approx([64.0] * len(row["prompt_tokens"]["values"]), abs=2)
