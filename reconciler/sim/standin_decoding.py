"""How the engine stand-in decodes and caches, read from the engine's own flags, and when its chunks are due.

A real engine decides two things a benchmark sees from its command line:

- speculative decoding (MTP, EAGLE, DSpark): after the prefill step, which
  yields one token, each decode step yields the tokens it accepted in one
  streamed chunk, so `usage.completion_tokens` and the content chunks differ;
- prefix caching: a prompt that starts with blocks an earlier prompt left in
  the KV cache is prefilled from the first block not found.

Flags, as the engines define them:

- vLLM: `--speculative-config` takes JSON (vllm/engine/arg_utils.py,
  `EngineArgs.add_cli_args`, type json.loads) with `method` and
  `num_speculative_tokens`; vLLM's parser also takes a field as a dotted flag
  (`--speculative-config.num_speculative_tokens 3`) and dashes and
  underscores alike before the first dot (vllm/utils/argparse_utils.py,
  `FlexibleArgumentParser.parse_args`). A step yields at most
  num_speculative_tokens + 1 tokens (the drafts and the target's own). A
  method without a count takes the draft model's, 1 for DeepSeek MTP.
  Prefix caching is on unless `--no-enable-prefix-caching`; the cache is kept
  in blocks of `--block-size` tokens (16 on CUDA).
- SGLang: `--speculative-algorithm` (EAGLE, EAGLE3, NEXTN, ...) with
  `--speculative-num-steps` and `--speculative-num-draft-tokens`
  (python/sglang/srt/server_args.py, `ServerArgs.add_cli_args`): a step
  yields at most num_steps + 1 tokens, and no more than the draft tokens
  when that is given. Without the numbers SGLang picks them per
  architecture (`auto_choose_speculative_params`: 3 steps for DeepSeek,
  which the stand-in takes). The radix cache is on unless
  `--disable-radix-cache`, in pages of `--page-size` tokens (1).

The stand-in accepts every draft (its text is filler), counts one token per
prompt word, and keeps STANDIN_TG_TPS as the tokens it generates per second
whatever the chunking: a chunk of k tokens is due when its last token is.
Flags are matched by their full names (argparse's abbreviations are not).
Stdlib only.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.sim.engineargs import Behaviour, parse_int

VLLM_BLOCK = 16
SGLANG_PAGE = 1
SGLANG_DEFAULT_STEPS = 3
CACHE_BLOCKS = 1 << 18
"""Blocks the prefix cache remembers, newest kept (a long simulation must not grow)."""


@dataclass(frozen=True)
class Decoding:
    """What the engine's flags say about its decoding and its prefix cache."""

    tokens_per_step: int = 1
    prefix_caching: bool = True
    block_size: int = VLLM_BLOCK


def _flags(argv: Sequence[str]) -> dict[str, str]:
    """`--flag value`, `--flag=value` and bare `--flag` (value "") by name, underscores read as dashes."""
    out: dict[str, str] = {}
    args = list(argv)
    for i, word in enumerate(args):
        if not word.startswith("--"):
            continue
        name, eq, inline = word.partition("=")
        head, dot, rest = name.partition(".")
        name = head.replace("_", "-") + dot + rest
        if eq:
            out[name] = inline
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[name] = args[i + 1]
        else:
            out[name] = ""
    return out


def _vllm_speculative(flags: dict[str, str]) -> dict[str, Any] | None:
    config: dict[str, Any] = {}
    raw = flags.get("--speculative-config")
    if raw:
        try:
            loaded = json.loads(raw)
        except ValueError:
            loaded = None
        if isinstance(loaded, dict):
            config.update(loaded)
    prefix = "--speculative-config."
    for name, value in flags.items():
        if name.startswith(prefix):
            try:
                config[name[len(prefix) :]] = json.loads(value)
            except ValueError:
                config[name[len(prefix) :]] = value
    return config or None


def decoding_from_argv(argv: Sequence[str]) -> Decoding:
    """The decoding an engine started with `argv` would do (vLLM's flags or SGLang's, whichever it has)."""
    flags = _flags(argv)
    if any("sglang" in word for word in argv):
        steps = parse_int(flags.get("--speculative-num-steps"), SGLANG_DEFAULT_STEPS)
        per_step = steps + 1
        drafts = parse_int(flags.get("--speculative-num-draft-tokens"), 0)
        if drafts > 0:
            per_step = min(per_step, drafts)
        return Decoding(
            tokens_per_step=max(per_step, 1) if flags.get("--speculative-algorithm") else 1,
            prefix_caching="--disable-radix-cache" not in flags,
            block_size=max(parse_int(flags.get("--page-size"), SGLANG_PAGE), 1),
        )
    speculative = _vllm_speculative(flags)
    drafts = speculative.get("num_speculative_tokens", 1) if speculative else 0
    return Decoding(
        tokens_per_step=1 + (drafts if isinstance(drafts, int) and drafts > 0 else 0),
        prefix_caching="--no-enable-prefix-caching" not in flags,
        block_size=max(parse_int(flags.get("--block-size"), VLLM_BLOCK), 1),
    )


def chunk_schedule(
    behaviour: Behaviour, prompt_tokens: int, max_tokens: int, decoding: Decoding = Decoding(), cached_tokens: int = 0
) -> list[tuple[float, int]]:
    """(due, tokens) of every streamed chunk, due in seconds after the request arrived.

    Prefill of the tokens not cached at pp_tps, its one token first; then
    chunks of up to `tokens_per_step` tokens, each due when its last token
    is, one token every 1 / tg_tps; all times the slowdown.
    """
    if max_tokens <= 0:
        return []
    first = (prompt_tokens - cached_tokens) / behaviour.pp_tps * behaviour.slowdown
    step = behaviour.slowdown / behaviour.tg_tps
    chunks = [(first, 1)]
    sent = 1
    while sent < max_tokens:
        size = min(decoding.tokens_per_step, max_tokens - sent)
        sent += size
        chunks.append((first + (sent - 1) * step, size))
    return chunks


class PrefixCache:
    """Prompt prefixes an engine keeps, in blocks chained by hash as vLLM's cache keys them.

    A block is found only if every block before it is; the last prompt token
    is always prefilled, since the first generated token needs its logits
    (vLLM's KV cache manager caps a hit at the prompt length less one).
    """

    def __init__(self, block_size: int, capacity: int = CACHE_BLOCKS) -> None:
        self.block_size = block_size
        self.capacity = capacity
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def _chain(self, tokens: Sequence[str]) -> list[int]:
        keys: list[int] = []
        parent = 0
        size = self.block_size
        for start in range(0, len(tokens) - size + 1, size):
            parent = hash((parent, tuple(tokens[start : start + size])))
            keys.append(parent)
        return keys

    def cached(self, tokens: Sequence[str]) -> int:
        """Leading tokens of `tokens` found in the cache (at most all but the last)."""
        found = 0
        for key in self._chain(tokens):
            if key not in self._blocks:
                break
            self._blocks.move_to_end(key)
            found += 1
        return min(found * self.block_size, max(len(tokens) - 1, 0))

    def insert(self, tokens: Sequence[str]) -> None:
        """Keep the full blocks of a prefilled prompt, dropping the least recently used beyond capacity."""
        for key in self._chain(tokens):
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
