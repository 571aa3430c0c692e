"""How each engine reads its memory flag: what the fraction is of, what it covers, what lies outside it.

lanes has one lane field, `gpu_memory_utilization`, and renders it as each
engine's own flag (reconciler/engines/vllm.py, sglang.py, flare.py). The
engines do not mean the same thing by it, so the budget must not either.
Read from the engines' released code:

vLLM (vllm 0.33.0, vllm/v1/worker/utils.py `request_memory`;
vllm/v1/worker/gpu_worker.py `determine_available_memory`;
vllm/utils/mem_utils.py `MemorySnapshot.measure`):
  - the budget is ceil(total device memory x gpu_memory_utilization), total
    being torch's view of the device (on GB10, 121.7 GiB);
  - at start it refuses when the free memory is under that budget, and on
    integrated GPUs (`is_integrated_gpu`: GB10, GH200, Jetson) free memory
    is psutil's `available`, i.e. the OS's MemAvailable;
  - the budget covers weights, the activation peak of a profiling run,
    CUDA graphs and non-torch memory; the KV cache gets the rest;
  - `--kv-cache-memory-bytes` fixes the KV cache and skips the profiling
    ("does not respect the gpu_memory_utilization config"): weights +
    that KV + activations must then fit in what is free, while the start
    check against the fraction still runs;
  - a KV cache that cannot hold one max_model_len request refuses to start.

SGLang (sglang 0.5.23, sglang/srt/distributed/bootstrap.py
`measure_pre_model_load_memory`; sglang/srt/utils/common.py
`get_available_gpu_memory`; sglang/srt/mem_cache/kv_cache_configurator.py
`_profile_available_bytes`, `_apply_token_constraints`;
sglang/srt/managers/tp_worker.py):
  - before loading it measures free memory on every rank and takes the
    minimum over ranks; on integrated GPUs from psutil's `available`;
  - the KV pool is what is free after loading minus (1 - mem_fraction_static)
    x that boot figure: the fraction of the *free* memory covers weights and
    the KV pool, activations and CUDA graphs live in the remainder;
  - weights over the fraction refuse to start ("Loaded weights leave no GPU
    memory for the KV cache"); a pool under --context-length only logs a
    warning and caps each request at the pool (max_req_len = min(context_len,
    pool) - 1), so lanes must say so itself;
  - `--max-total-tokens` is an upper bound on the pool, never more than the
    fraction gives (min(profiled, max_total_tokens)).

FLARE publishes no memory semantics; it takes vLLM's flag name, so vLLM's
reading is assumed and the output says so. A generic lane's command is its
args: lanes passes no fraction, the budget is lanes' own bound.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

Base = Literal["torch_visible", "boot_free"]


@dataclass(frozen=True)
class MemorySemantics:
    engine: str
    flag: str
    """The engine's own name for the fraction, as messages should say it."""
    fraction_of: Base
    """torch_visible: total device memory; boot_free: free memory measured at boot (minimum over ranks)."""
    covers_overhead: bool
    """True: activations, CUDA graphs and runtime live inside the budget; False: in the remainder."""
    kv_bytes_flag: str | None
    kv_tokens_flag: str | None
    caps_context: bool
    """True: a pool under max_model_len shortens requests instead of refusing to start."""
    source: str


SEMANTICS: dict[str, MemorySemantics] = {
    "vllm": MemorySemantics(
        engine="vllm",
        flag="--gpu-memory-utilization",
        fraction_of="torch_visible",
        covers_overhead=True,
        kv_bytes_flag="--kv-cache-memory-bytes",
        kv_tokens_flag=None,
        caps_context=False,
        source="vllm 0.33.0: vllm/v1/worker/utils.py request_memory, vllm/v1/worker/gpu_worker.py "
        "determine_available_memory, vllm/utils/mem_utils.py MemorySnapshot.measure",
    ),
    "sglang": MemorySemantics(
        engine="sglang",
        flag="--mem-fraction-static",
        fraction_of="boot_free",
        covers_overhead=False,
        kv_bytes_flag=None,
        kv_tokens_flag="--max-total-tokens",
        caps_context=True,
        source="sglang 0.5.23: sglang/srt/distributed/bootstrap.py, sglang/srt/utils/common.py "
        "get_available_gpu_memory, sglang/srt/mem_cache/kv_cache_configurator.py _profile_available_bytes, "
        "sglang/srt/managers/tp_worker.py",
    ),
    "flare": MemorySemantics(
        engine="flare",
        flag="--gpu-memory-utilization",
        fraction_of="torch_visible",
        covers_overhead=True,
        kv_bytes_flag=None,
        kv_tokens_flag=None,
        caps_context=False,
        source="no published FLARE memory semantics: vLLM's reading of the same flag name is assumed",
    ),
    "generic": MemorySemantics(
        engine="generic",
        flag="gpu_memory_utilization",
        fraction_of="torch_visible",
        covers_overhead=True,
        kv_bytes_flag=None,
        kv_tokens_flag=None,
        caps_context=False,
        source="a generic lane's command is its args: lanes passes no fraction, the budget is lanes' bound",
    ),
}


def arg_value(args: tuple[str, ...], flag: str) -> str | None:
    """The value of `flag` in an argv (`--flag v` or `--flag=v`); the last one wins, as argparse does."""
    found = None
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            found = args[index + 1]
        elif arg.startswith(flag + "="):
            found = arg[len(flag) + 1 :]
    return found


# vllm 0.33.0 vllm/utils/argparse_utils.py human_readable_int: k/m/g/t are powers of 10, K/M/G/T of 2.
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def human_int(text: str) -> int | None:
    """vLLM's reading of an integer flag like --kv-cache-memory-bytes ('15032385536', '14G', '15g')."""
    text = text.strip()
    match = _HUMAN.fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        return int(number) * _BINARY[suffix] if number.isdigit() else None  # vLLM refuses '1.5G'
    # vLLM takes any int() here; a negative or signed size is not one lanes can budget.
    return int(text) if text.isdigit() else None


def utilization(args: tuple[str, ...], semantics: MemorySemantics, field: float) -> float:
    """The fraction the engine will see: the lane's field, unless the lane's args (rendered last) override it."""
    if semantics.engine == "generic":
        return field
    raw = arg_value(args, semantics.flag)
    if raw is None:
        return field
    try:
        value = float(raw)
    except ValueError:
        return field  # the engine-flags rule says what is wrong with it
    return value if 0 < value <= 1 else field


# Speculative decoding methods, by the family whose memory they cost alike.
# vllm 0.33.0 vllm/config/speculative.py (MTPModelTypes, EagleModelTypes, SpeculativeMethod);
# sglang 0.5.23 sglang/srt/speculative/spec_info.py SpeculativeAlgorithm, spec_registry.py (NEXTN -> EAGLE
# over the model's own MTP layers).
_VLLM_FAMILY = {
    "ngram": "ngram",
    "ngram_gpu": "ngram",
    "suffix": "ngram",
    "draft_model": "draft_model",
    "eagle": "eagle",
    "eagle3": "eagle",
    "dflash": "eagle",
    "dspark": "eagle",
    "extract_hidden_states": "eagle",
}
_SGLANG_FAMILY = {
    "NGRAM": "ngram",
    "NEXTN": "mtp",
    "FROZEN_KV_MTP": "mtp",
    "EAGLE": "eagle",
    "EAGLE3": "eagle",
    "DFLASH": "eagle",
    "DSPARK": "eagle",
    "STANDALONE": "draft_model",
}


@dataclass(frozen=True)
class Speculation:
    method: str
    """The engine's own name for it (vLLM `method`, SGLang `--speculative-algorithm`)."""
    family: str
    """mtp, eagle, draft_model, ngram, or unknown: what sizes its memory."""
    draft_path: bool = False
    """A separate draft checkpoint is named (its weights are not the model's)."""


def speculation(engine: str, args: tuple[str, ...]) -> Speculation | None:
    """The speculative decoding a lane's args turn on, if any."""
    if engine == "sglang":
        algorithm = arg_value(args, "--speculative-algorithm")
        if algorithm is None:
            return None
        family = _SGLANG_FAMILY.get(algorithm.upper(), "unknown")
        draft = arg_value(args, "--speculative-draft-model-path") is not None
        if family == "eagle" and not draft:
            family = "mtp"  # EAGLE with no draft checkpoint runs the model's own MTP layers
        return Speculation(method=algorithm, family=family, draft_path=draft)
    raw = arg_value(args, "--speculative-config")
    if raw is None:
        if arg_value(args, "--speculative-model") is not None:
            return Speculation(method="draft_model", family="draft_model", draft_path=True)
        return None
    try:
        config = json.loads(raw)
    except ValueError:
        return Speculation(method="?", family="unknown")
    if not isinstance(config, dict):
        return Speculation(method="?", family="unknown")
    method = str(config.get("method") or ("draft_model" if config.get("model") else "?"))
    family = "mtp" if method == "mtp" or method.endswith("_mtp") else _VLLM_FAMILY.get(method, "unknown")
    return Speculation(method=method, family=family, draft_path=bool(config.get("model")))
