"""Pipeline stages as each engine cuts them, and the weights each stage holds.

Why this module exists: with pp > 1 the ranks of a lane do not hold the same
bytes. The engines split the decoder layers unevenly when pp does not divide
them, and they each put the remainder somewhere else; the input embedding
sits on the first stage and the LM head on the last, outside every layer.
Sizing a rank as weight_bytes / (tp x pp) misses both.

Layer split, read from the engines' own source:

- vLLM (vllm/distributed/utils.py get_pp_indices, vllm 0.25.1 to 0.33.0):
  layers // pp per stage, and the `layers % pp` extra layers go one each to
  the stages before the last, starting with the one just before it
  (partitions[-2], partitions[-3], ...); the last stage never takes one. The
  environment variable VLLM_PP_LAYER_PARTITION ("a,b,c") replaces the split.
- SGLang (python/sglang/srt/distributed/utils.py get_pp_indices, sglang
  0.5.23): the extra layers go to the last `layers % pp` stages;
  SGLANG_PP_LAYER_PARTITION replaces the split.

Other engines (FLARE, generic) have no split lanes has read; they are cut as
vLLM cuts, and the note says so.

Weights of a stage, before the tp split:

- E = vocab_size x hidden_size x embedding_dtype_bytes, the input embedding;
  the LM head is as large. A checkpoint holds E once when the head is tied to
  the embedding (tie_word_embeddings) and 2E otherwise.
- The decoder layers share the rest evenly: body = weight_bytes - E (tied) or
  - 2E (untied), body x stage_layers / layers per stage. Dense-first MoE
  models and MTP layers break this evenness; lanes has no per-layer figure.
- The first stage adds E. The last stage adds E as well: the LM head when
  untied, and when tied a copy of the embedding, which vLLM builds on the last
  rank for the tied head (vllm/model_executor/models/llama.py LlamaModel
  builds embed_tokens on the first rank and, when tie_word_embeddings, on the
  last; LlamaForCausalLM ties lm_head to it). With pp = 1 the one stage holds
  the checkpoint as it is.
- One rank holds ceil(stage bytes / tp): every piece is split over tp
  (VocabParallelEmbedding and ParallelLMHead shard the vocabulary).

Without vocab_size and hidden_size the embedding cannot be placed: the
weights are spread evenly over the layers and the note says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.spec.model import ModelSpec

PARTITION_ENV = {"vllm": "VLLM_PP_LAYER_PARTITION", "sglang": "SGLANG_PP_LAYER_PARTITION"}


@dataclass(frozen=True)
class Partition:
    """Layers per pipeline stage, in stage order, and how they were decided."""

    sizes: tuple[int, ...]
    note: str | None = None

    def ranges(self) -> list[tuple[int, int]]:
        """(start, end) layer indices of every stage, end exclusive."""
        out = []
        start = 0
        for size in self.sizes:
            out.append((start, start + size))
            start += size
        return out


def vllm_split(layers: int, pp: int) -> tuple[int, ...]:
    """vLLM's default split (vllm/distributed/utils.py get_pp_indices, 0.33.0)."""
    sizes = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        sizes[-i] += 1
    return tuple(sizes)


def sglang_split(layers: int, pp: int) -> tuple[int, ...]:
    """SGLang's default split (sglang/srt/distributed/utils.py get_pp_indices, 0.5.23)."""
    base, extra = divmod(layers, pp)
    return tuple(base + (1 if stage >= pp - extra else 0) for stage in range(pp))


def _from_env(text: str, layers: int, pp: int, name: str) -> tuple[tuple[int, ...] | None, str]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        return None, f"{name}={text!r} is not a list of integers: the engine refuses to start"
    if len(sizes) != pp:
        return None, f"{name} lists {len(sizes)} stages but pp is {pp}: the engine refuses to start"
    if sum(sizes) != layers or min(sizes) < 0:
        return None, f"{name} sums to {sum(sizes)} layers but the model has {layers}: the engine refuses to start"
    return sizes, f"stages from {name}={text}"


def pp_partition(layers: int, pp: int, engine: str, env: Mapping[str, str] | None = None) -> Partition:
    """The layers each stage of `engine` holds, honouring the engine's partition variable in `env`.

    An override the engine would refuse is reported in the note and the
    default split is used for the figures.
    """
    split = sglang_split if engine == "sglang" else vllm_split
    default = split(layers, pp)
    env_name = PARTITION_ENV.get(engine, PARTITION_ENV["vllm"])
    note = None if engine in PARTITION_ENV or pp == 1 else f"{engine}: pipeline stages cut as vLLM cuts them"
    text = (env or {}).get(env_name)
    if text is not None and pp > 1:
        sizes, why = _from_env(text, layers, pp, env_name)
        if sizes is not None:
            return Partition(sizes=sizes, note=why)
        return Partition(sizes=default, note=why)
    return Partition(sizes=default, note=note)


@dataclass(frozen=True)
class StageWeights:
    """Bytes of weights each pipeline stage holds, before the tp split."""

    stages: tuple[int, ...]
    embedding: int
    notes: tuple[str, ...] = ()

    def per_rank(self, stage: int, tp: int) -> int:
        return math.ceil(self.stages[stage] / tp)


def embedding_bytes(model: ModelSpec) -> int | None:
    """vocab_size x hidden_size x embedding_dtype_bytes, or None when the model file lacks a figure."""
    arch = model.architecture
    if arch.vocab_size is None or arch.hidden_size is None:
        return None
    return math.ceil(arch.vocab_size * arch.hidden_size * arch.embedding_dtype_bytes)


def stage_weights(model: ModelSpec, partition: Partition, offloaded: int = 0) -> StageWeights:
    """The weights of every stage: its layers' share of the body, plus the embedding and LM head where they sit.

    `offloaded` bytes (weights the lane keeps off the GPU, e.g. streamed
    experts) come out of the layers' share, never out of the embeddings.
    """
    arch = model.architecture
    sizes = partition.sizes
    last = len(sizes) - 1
    embed = embedding_bytes(model)
    notes = []
    if embed is not None:
        in_checkpoint = embed if arch.tie_word_embeddings else 2 * embed
        if in_checkpoint >= model.weight_bytes:
            notes.append(
                f"embedding and LM head ({in_checkpoint} B) are not smaller than weight_bytes: "
                "weights spread evenly over the layers"
            )
            embed = None
    if embed is None:
        missing = [name for name in ("vocab_size", "hidden_size") if getattr(arch, name) is None]
        if missing:
            notes.append(
                f"the model file has no {' or '.join(missing)}: the embedding and LM head are not placed on "
                "their stages, the weights are spread evenly over the layers"
            )
        body = model.weight_bytes
        extra = [0] * len(sizes)
        embed_out = 0
    else:
        body = model.weight_bytes - (embed if arch.tie_word_embeddings else 2 * embed)
        extra = [0] * len(sizes)
        extra[0] += embed
        # The last stage holds the LM head (untied) or a copy of the tied embedding for it (pp > 1);
        # with one stage a tied head is the embedding itself and adds nothing.
        if not arch.tie_word_embeddings or last > 0:
            extra[last] += embed
        embed_out = embed
    body = max(body - offloaded, 0)
    stages = tuple(math.ceil(body * size / arch.layers) + extra[stage] for stage, size in enumerate(sizes))
    return StageWeights(stages=stages, embedding=embed_out, notes=tuple(notes))


def weights_per_stage_rank(
    model: ModelSpec, partition: Sequence[int] | Partition, tp: int, offloaded: int = 0
) -> tuple[int, ...]:
    """Bytes of weights on one rank of each stage: ceil(stage weights / tp)."""
    part = partition if isinstance(partition, Partition) else Partition(sizes=tuple(partition))
    weights = stage_weights(model, part, offloaded)
    return tuple(weights.per_rank(stage, tp) for stage in range(len(part.sizes)))
