"""`lanes bench` figures on a fake clock: the stand-in's pacing, replayed without sleeping.

The engine here answers on an `httpx.MockTransport` with the events the
stand-in sends, each token at the time the stand-in's own `schedule` gives
it. Time is virtual: the bench client's clock (`time.perf_counter` in
`reconciler.bench.client`) reads the virtual time of the request it is
reading, and a chunk's arrival moves that clock to the chunk's due time. So
every figure is exact, on any machine at any load, and the test can say
what each must be: pp and tg per request, the batch totals at concurrency 4
(each request of a batch is paced on its own, from the same instant, as the
stand-in paces each on a thread of its own), TTFT, ITL, and a 25 % slower
engine flagged as a 20 % regression. How close the client comes on a real
clock is a figure of speed, printed by `bench/harness_accuracy.py`.

The latency subtracted from the time to first response is measured as on a
real engine (a one-word, one-token request), so the prefill it is left with
is 511 of the 512 tokens' pacing: pp per request is 512/511 of the setting.

The engine reads its decoding from an engine argv as the stand-in does
(`standin_decoding`): with speculative decoding each chunk carries several
tokens, and tg in usage tokens and in stream chunks differ by exactly what
the pacing says; with its prefix cache, the prefix-cached mode's pp counts
the prompt over a cached context.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import types
import uuid
import xml.etree.ElementTree as ET
from typing import Any

import httpx
import pytest

from reconciler.bench import chart
from reconciler.bench.evidence import LaneIdentity, build_evidence, headline
from reconciler.bench.metrics import Shape
from reconciler.bench.runner import BenchRun, run_profile
from reconciler.sim.engineargs import Behaviour
from reconciler.sim.standin_decoding import PrefixCache, chunk_schedule, decoding_from_argv
from reconciler.sim.standin_http import prompt_tokens, schedule
from reconciler.spec.bench import BenchProfile

pytestmark = pytest.mark.timeout(60)

MODEL = "paced-model"
PP_TPS = 500.0
TG_TPS = 200.0
PP, TG = 512, 64
PROFILE = BenchProfile(name="fake-clock", pp=(PP,), tg=(TG,), concurrency=(1, 4), repetitions=3, warmup=1)
IDENTITY = LaneIdentity(
    lane="bench-lane",
    commit="c0ffee" + "0" * 34,
    engine="vllm",
    engine_version="0.32.0",
    image="vllm/vllm-openai@sha256:" + "ab" * 32,
    hosts=("dgx5", "dgx6"),
)

_now: contextvars.ContextVar[float] = contextvars.ContextVar("virtual_now", default=1000.0)
"""The virtual time of the asyncio task reading it. A task starts at its parent's time when it is
created: the requests of one batch start together, and each one's chunks move only its own clock."""


def _perf_counter() -> float:
    return _now.get()


class PacedStream(httpx.AsyncByteStream):
    """SSE events, each handed to the reader at its due time on the reader's virtual clock."""

    def __init__(self, start: float, events: list[tuple[float, bytes]]) -> None:
        self.start = start
        self.events = events

    async def __aiter__(self) -> Any:
        for due, data in self.events:
            _now.set(max(_now.get(), self.start + due))
            yield data


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


VLLM = ["vllm", "serve", "/models/m", "--served-model-name", MODEL]


def paced_engine(behaviour: Behaviour, argv: list[str] = VLLM) -> httpx.MockTransport:
    """/v1/models, /version and streamed completions with usage, paced and cached like the stand-in."""
    decoding = decoding_from_argv(argv)
    cache = PrefixCache(decoding.block_size) if decoding.prefix_caching else None

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": behaviour.version})
        body: dict[str, Any] = json.loads(request.content)
        assert request.url.path == "/v1/completions" and body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        tokens, wanted = prompt_tokens(body), int(body["max_tokens"])
        prompt = len(tokens)
        cached = cache.cached(tokens) if cache is not None else 0
        if cache is not None:
            cache.insert(tokens)  # the client reads each answer whole before it sends the next that could hit it
        due = chunk_schedule(behaviour, prompt, wanted, decoding, cached)
        base = {"id": "cmpl-" + uuid.uuid4().hex[:16], "object": "text_completion", "model": MODEL}
        events = [
            (t, _event({**base, "choices": [{"index": 0, "text": " w" * size, "finish_reason": None}]}))
            for t, size in due
        ]
        usage = {"prompt_tokens": prompt, "completion_tokens": wanted, "total_tokens": prompt + wanted}
        end = due[-1][0] if due else 0.0
        events += [(end, _event({**base, "choices": [], "usage": usage})), (end, b"data: [DONE]\n\n")]
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=PacedStream(_now.get(), events)
        )

    return httpx.MockTransport(handle)


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("reconciler.bench.client.time", types.SimpleNamespace(perf_counter=_perf_counter))


def _run(slowdown: float = 1.0, argv: list[str] = VLLM, profile: BenchProfile = PROFILE) -> BenchRun:
    behaviour = Behaviour(pp_tps=PP_TPS, tg_tps=TG_TPS, slowdown=slowdown)

    async def go() -> BenchRun:
        engine = paced_engine(behaviour, argv)
        return await run_profile(profile, url="http://engine:8000", model=MODEL, transport=engine)

    # A context of its own: every run starts at the same virtual instant.
    return contextvars.Context().run(asyncio.run, go())


def _row(run: BenchRun, concurrency: int) -> dict[str, Any]:
    return next(r for r in run.rows if r["concurrency"] == concurrency)


def _values(row: dict[str, Any], metric: str) -> list[float]:
    values: list[float] = row[metric]["values"]
    return values


def test_per_request_figures_are_the_pacing_exactly() -> None:
    run = _run()
    latency = schedule(Behaviour(pp_tps=PP_TPS, tg_tps=TG_TPS), 1, 1)[0]  # a one-word prompt, one token
    assert run.latency_s == pytest.approx(latency, rel=1e-9)
    assert run.sized_tokens == {(PP, 0): PP}
    for concurrency in (1, 4):
        row = _row(run, concurrency)
        n = concurrency * PROFILE.repetitions
        assert row["requests"] == n and row["errors"] == 0
        assert _values(row, "prompt_tokens") == [float(PP)] * n
        assert _values(row, "completion_tokens") == [float(TG)] * n
        exact = {
            "pp_req_throughput": PP_TPS * PP / (PP - 1),
            "tg_req_throughput": TG_TPS,
            "e2e_ttft": PP / PP_TPS * 1000,
            "ttfr": PP / PP_TPS * 1000,
            "est_ppt": (PP - 1) / PP_TPS * 1000,
            "itl": 1000 / TG_TPS,
            "e2e_latency": (PP / PP_TPS + (TG - 1) / TG_TPS) * 1000,
        }
        for metric, value in exact.items():
            assert _values(row, metric) == pytest.approx([value] * n, rel=1e-9), metric


def test_batch_totals_add_up_over_requests_paced_side_by_side() -> None:
    run = _run()
    one, four = _row(run, 1), _row(run, 4)
    # At concurrency 1 the totals are the per-request figures.
    assert _values(one, "pp_throughput") == _values(one, "pp_req_throughput")
    assert _values(one, "tg_throughput") == _values(one, "tg_req_throughput")
    # Four requests sent together, each paced on its own: four times the prompt tokens in the prefill
    # time of one, and four times the tokens in the decode time of one (llama-benchy's batch rates).
    assert _values(four, "pp_throughput") == pytest.approx([4 * PP_TPS] * PROFILE.repetitions, rel=1e-9)
    assert _values(four, "tg_throughput") == pytest.approx([4 * TG_TPS] * PROFILE.repetitions, rel=1e-9)
    assert {Shape(PP, TG, 0, c) for c in (1, 4)} == set(run.records)


def test_an_engine_25_percent_slower_is_a_20_percent_regression() -> None:
    baseline = build_evidence(_run(), IDENTITY)
    assert baseline["regression"] is False and baseline["comparison"] is None
    slow = build_evidence(_run(slowdown=1.25), IDENTITY, baseline=baseline)
    assert slow["regression"] is True
    comparison = slow["comparison"]
    throughputs = ("pp_throughput", "pp_req_throughput", "tg_throughput", "tg_req_throughput")
    flagged = {(m["metric"], m["concurrency"]) for m in comparison["metrics"] if m["verdict"] == "worse"}
    assert {(metric, c) for metric in throughputs for c in (1, 4)} <= flagged
    for m in comparison["metrics"]:
        if m["metric"] in throughputs:
            # Every duration x1.25, the subtracted latency too: every rate x0.8, with no spread at all.
            assert m["relative"] == pytest.approx(-0.2, rel=1e-9), m
            assert m["beyond_noise"] and m["noise"] == pytest.approx(0.0, abs=1e-6)
    assert any(r.startswith(f"tg_throughput pp{PP}/tg{TG} c1") for r in comparison["regressions"])
    svg = chart.render_svg(slow, baseline)
    assert ET.fromstring(svg).tag == "{http://www.w3.org/2000/svg}svg"
    assert "REGRESSION" in svg and chart.WORSE_COLOR in svg


MTP3 = [*VLLM, "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}']


def test_a_speculative_engine_reads_tg_by_usage_tokens_and_by_stream_chunks() -> None:
    run = _run(argv=MTP3)
    assert run.tg_basis == "usage_tokens"
    # The prefill's one token, then chunks of 4 (3 drafts and the target's own): 1 + 16 + a last chunk of 3.
    chunks = 1 + (TG - 1) // 4 + (1 if (TG - 1) % 4 else 0)
    decode_s = (TG - 1) / TG_TPS  # the engine still makes TG_TPS tokens a second
    for concurrency in (1, 4):
        row = _row(run, concurrency)
        n = concurrency * PROFILE.repetitions
        assert row["tg_basis"] == "usage_tokens"
        assert _values(row, "completion_tokens") == [float(TG)] * n
        assert _values(row, "content_chunks") == [float(chunks)] * n
        assert _values(row, "tg_req_throughput") == pytest.approx([TG_TPS] * n, rel=1e-9)
        assert _values(row, "tg_req_throughput_chunks") == pytest.approx([(chunks - 1) / decode_s] * n, rel=1e-9)
        # llama-benchy's peak: under one second, every token over the time from first to last.
        assert _values(row, "peak_req_throughput") == pytest.approx([TG / decode_s] * n, rel=1e-9)
        assert _values(row, "peak_req_throughput_chunks") == pytest.approx([chunks / decode_s] * n, rel=1e-9)
    four = _row(run, 4)
    assert _values(four, "tg_throughput") == pytest.approx([4 * TG_TPS] * PROFILE.repetitions, rel=1e-9)
    assert _values(four, "peak_throughput") == pytest.approx([4 * TG / decode_s] * PROFILE.repetitions, rel=1e-9)
    ev = build_evidence(run, IDENTITY)
    assert ev["tg_basis"] == "usage_tokens"
    assert headline(ev)["tg"] == f"tg{TG} {TG_TPS:.1f} t/s (usage tokens)"


def test_without_speculation_the_two_counts_agree() -> None:
    row = _row(_run(), 1)
    assert _values(row, "tg_req_throughput_chunks") == _values(row, "tg_req_throughput")
    assert _values(row, "content_chunks") == _values(row, "completion_tokens")


DEPTH = 1024  # 64 blocks of 16 words: the context is cached whole
CACHED = BenchProfile(
    name="prefix-cached",
    pp=(PP,),
    tg=(TG,),
    depth=(DEPTH,),
    concurrency=(1, 4),
    repetitions=2,
    warmup=0,
    prefix_cached=True,
)


def test_the_prefix_cached_mode_measures_the_prompt_over_a_cached_context() -> None:
    run = _run(profile=CACHED)
    ctx, measured = (r for r in run.rows if r["concurrency"] == 1)
    assert (ctx["is_context_prefill_phase"], measured["is_context_prefill_phase"]) == (True, False)
    n = CACHED.repetitions
    # The context load prefills DEPTH tokens; the full request finds them cached and prefills PP.
    assert _values(ctx, "prompt_tokens") == [float(DEPTH)] * n
    assert _values(ctx, "ttfr") == pytest.approx([DEPTH / PP_TPS * 1000] * n, rel=1e-9)
    assert _values(measured, "prompt_tokens") == [float(PP)] * n
    assert _values(measured, "ttfr") == pytest.approx([PP / PP_TPS * 1000] * n, rel=1e-9)
    assert _values(measured, "pp_req_throughput") == pytest.approx([PP_TPS * PP / (PP - 1)] * n, rel=1e-9)
    four = [r for r in run.rows if r["concurrency"] == 4]
    assert [r["is_context_prefill_phase"] for r in four] == [True, False]
    assert _values(four[1], "pp_throughput") == pytest.approx([4 * PP_TPS] * n, rel=1e-9)
    assert len(run.context_records[Shape(PP, TG, DEPTH, 4)]) == n
    assert build_evidence(run, IDENTITY)["prefix_caching_enabled"] is True


def test_without_a_prefix_cache_the_same_mode_shows_the_whole_prefill() -> None:
    run = _run(argv=[*VLLM, "--no-enable-prefix-caching"], profile=CACHED)
    measured = next(r for r in run.rows if r["concurrency"] == 1 and not r["is_context_prefill_phase"])
    # Nothing was cached: PP tokens counted, PP + DEPTH prefilled.
    prefill_s = (PP + DEPTH - 1) / PP_TPS
    assert _values(measured, "pp_req_throughput") == pytest.approx([PP / prefill_s] * CACHED.repetitions, rel=1e-9)
