"""Run a benchmark profile against one endpoint: size prompts, warm up, measure.

Order of work, each step reported to the progress callback:

1. calibration: two probe requests learn how the server counts words
   (`prompts.fit`);
2. sizing: for every distinct (pp, depth) the word count is checked against
   the server's count and corrected until it is exact (or within
   `SIZE_TOLERANCE` when a real tokenizer counts random words unevenly);
3. latency: the figure subtracted from the time to first response;
4. the grid, in llama-benchy's order (depth, pp, tg, concurrency): `warmup`
   discarded batches, then `repetitions` measured batches of `concurrency`
   requests sent together, every request with its own words. In the
   prefix-cached mode (`prefix_cached`, at depths above 0) each batch is two,
   as llama-benchy runs it (runner.py `BenchmarkRunner.run_suite`): the
   contexts alone, sent together, then the same contexts with their prompts;
5. the rows, once every grid point is measured: the tg basis (usage tokens
   or stream chunks, `rates.run_basis`) is one for the whole run.

Failed requests are counted in the row; a grid point where every request
failed ends the run, since evidence with a hole in it would compare badly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from reconciler.bench import prompts
from reconciler.bench.client import BenchClient, RequestRecord
from reconciler.bench.metrics import Shape, summarize
from reconciler.bench.prompts import Prompt
from reconciler.bench.rates import TgBasis, run_basis
from reconciler.errors import PermanentError, TransientError
from reconciler.spec.bench import BenchProfile

CALIBRATION_WORDS = (16, 256)
SIZING_ROUNDS = 4
SIZE_TOLERANCE = 0.005
"""A sized prompt within 0.5% of its target (or 1 token) is accepted."""


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    label: str


ProgressFn = Callable[[Progress], None]


@dataclass
class BenchRun:
    """What a profile run measured, before it becomes evidence."""

    profile: BenchProfile
    url: str
    model: str
    started: datetime
    finished: datetime
    latency_s: float
    fit: prompts.TokenFit
    sized_words: dict[tuple[int, int], int]
    """(pp, depth) -> words of generated text that the server counts as pp + depth tokens."""
    sized_tokens: dict[tuple[int, int], int]
    """(pp, depth) -> what the server counted for the sized prompt."""
    rows: list[dict[str, Any]]
    prefix: tuple[str, ...] = ()
    server_version: str | None = None
    records: dict[Shape, list[list[RequestRecord]]] = field(default_factory=dict, repr=False)
    context_records: dict[Shape, list[list[RequestRecord]]] = field(default_factory=dict, repr=False)
    """The context loads of the prefix-cached mode, per grid point and batch."""
    tg_basis: TgBasis = "usage_tokens"
    """What the headline tg counts (`rates.run_basis`)."""


def _shapes(profile: BenchProfile) -> list[Shape]:
    return [
        Shape(pp, tg, depth, c)
        for depth in profile.depth
        for pp in profile.pp
        for tg in profile.tg
        for c in profile.concurrency
    ]


class _Ticker:
    def __init__(self, total: int, callback: ProgressFn | None) -> None:
        self.done = 0
        self.total = total
        self.callback = callback

    def tick(self, label: str, steps: int = 1) -> None:
        self.done += steps
        if self.callback is not None:
            self.callback(Progress(self.done, self.total, label))


async def _size(
    client: BenchClient, profile: BenchProfile, prefix: tuple[str, ...], ticker: _Ticker
) -> tuple[prompts.TokenFit, dict[tuple[int, int], int], dict[tuple[int, int], int]]:
    samples = []
    for count in CALIBRATION_WORDS:
        probe = prompts.build(profile.seed, f"calibrate:{count}", count, count, 0, prefix)
        samples.append((count, await client.count_prompt_tokens(probe)))
    fit = prompts.fit(samples)
    ticker.tick("calibrated prompt sizes")
    words: dict[tuple[int, int], int] = {}
    counted: dict[tuple[int, int], int] = {}
    for depth in profile.depth:
        for pp in profile.pp:
            target = pp + depth
            guess = fit.words_for(target)
            got = 0
            for _ in range(SIZING_ROUNDS):
                prompt = prompts.build(profile.seed, f"size:{pp}:{depth}", guess, pp, depth, prefix)
                got = await client.count_prompt_tokens(prompt)
                if abs(got - target) <= max(1.0, SIZE_TOLERANCE * target):
                    break
                guess = prompts.refine(guess, got, target, fit.per_word)
            else:
                if abs(got - target) > max(1.0, 0.02 * target):
                    raise PermanentError(
                        f"cannot size a {target}-token prompt on {client.root}: "
                        f"{guess} words are counted as {got} tokens after {SIZING_ROUNDS} tries"
                    )
            words[(pp, depth)] = guess
            counted[(pp, depth)] = got
            ticker.tick(f"sized pp{pp}" + (f" @ d{depth}" if depth else ""))
    return fit, words, counted


def _prompts(profile: BenchProfile, shape: Shape, word_count: int, tag: str, prefix: tuple[str, ...]) -> list[Prompt]:
    return [
        prompts.build(
            profile.seed,
            f"{tag}:{shape.pp}:{shape.tg}:{shape.depth}:{shape.concurrency}:{i}",
            word_count,
            shape.pp,
            shape.depth,
            prefix,
        )
        for i in range(shape.concurrency)
    ]


async def _send(client: BenchClient, batch: list[Prompt], max_tokens: int) -> list[RequestRecord]:
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(client.stream(p, max_tokens)) for p in batch]
    return [t.result() for t in tasks]


async def _batch(
    client: BenchClient, profile: BenchProfile, shape: Shape, word_count: int, tag: str, prefix: tuple[str, ...]
) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """(context loads, measured requests) of one batch; no context loads outside the prefix-cached mode."""
    batch = _prompts(profile, shape, word_count, tag, prefix)
    if not (profile.prefix_cached and shape.depth):
        return [], await _send(client, batch, shape.tg)
    # As llama-benchy: every context load of the batch together, then every full request together,
    # each load asking for as many tokens as the measured request.
    loads = await _send(client, [p.context_only(shape.depth) for p in batch], shape.tg)
    measured = await _send(client, batch, shape.tg)
    for load, record in zip(loads, measured, strict=True):
        if not load.ok and record.ok:
            # Not a prompt over a cached context: its figures would pass for one.
            record.error = f"its context load failed: {load.error}"
        record.prefix_tokens = load.prompt_tokens if load.prompt_tokens is not None else shape.depth
    return loads, measured


async def run_profile(
    profile: BenchProfile,
    *,
    url: str,
    model: str,
    progress: ProgressFn | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    prefix: tuple[str, ...] | None = None,
) -> BenchRun:
    """Measure every grid point of `profile` against the endpoint at `url` serving `model`.

    `prefix`: the words every prompt starts with; by default a fresh
    `prompts.run_prefix()` when the profile asks for one, else none.
    """
    if prefix is None:
        prefix = prompts.run_prefix() if profile.fresh_prefix else ()
    shapes = _shapes(profile)
    targets = len(profile.pp) * len(profile.depth)
    ticker = _Ticker(2 + targets + len(shapes) * (profile.warmup + profile.repetitions), progress)
    started = datetime.now(UTC)
    async with BenchClient(
        url,
        model,
        api=profile.api,
        timeout_s=profile.request_timeout_s,
        max_connections=max(profile.concurrency) + 2,
        transport=transport,
    ) as client:
        served = await client.served_models()
        if model not in served:
            raise PermanentError(f"{client.root} does not serve '{model}' (it lists: {', '.join(served) or 'nothing'})")
        version = await client.server_version()
        fit, words, counted = await _size(client, profile, prefix, ticker)
        latency = await client.latency(profile.latency_mode)
        ticker.tick(f"latency {latency * 1000:.1f} ms ({profile.latency_mode})")
        records: dict[Shape, list[list[RequestRecord]]] = {}
        context_records: dict[Shape, list[list[RequestRecord]]] = {}
        for shape in shapes:
            word_count = words[(shape.pp, shape.depth)]
            for run in range(profile.warmup):
                await _batch(client, profile, shape, word_count, f"warmup{run}", prefix)
                ticker.tick(f"{shape.label()} warmup {run + 1}/{profile.warmup}")
            batches: list[list[RequestRecord]] = []
            loads: list[list[RequestRecord]] = []
            for run in range(profile.repetitions):
                load, measured = await _batch(client, profile, shape, word_count, f"run{run}", prefix)
                batches.append(measured)
                loads.append(load)
                ticker.tick(f"{shape.label()} run {run + 1}/{profile.repetitions}")
            failed = [r.error for batch in batches for r in batch if not r.ok]
            if len(failed) == shape.concurrency * profile.repetitions:
                raise TransientError(f"{shape.label()}: every request failed on {client.root}: {failed[0]}")
            records[shape] = batches
            if any(loads):
                context_records[shape] = loads
    basis = run_basis([r for batches in records.values() for batch in batches for r in batch])
    rows: list[dict[str, Any]] = []
    for shape, batches in records.items():
        if shape in context_records:
            # llama-benchy's order: the context-load row, then the measured row (results.py `_generate_rows`).
            rows.append(
                summarize(shape, context_records[shape], latency, basis, prefix_cached=True, context_phase=True)
            )
        rows.append(summarize(shape, batches, latency, basis, prefix_cached=profile.prefix_cached))
    return BenchRun(
        profile=profile,
        url=client.root,
        model=model,
        started=started,
        finished=datetime.now(UTC),
        latency_s=latency,
        fit=fit,
        sized_words=words,
        sized_tokens=counted,
        rows=rows,
        prefix=prefix,
        server_version=version,
        records=records,
        context_records=context_records,
        tg_basis=basis,
    )
