"""vLLM's rewrite of a `vllm serve` command line before argparse reads it.

vLLM parses with `FlexibleArgumentParser` (vllm/utils/argparse_utils.py,
the same in 0.26.0 and 0.32.0), whose `parse_args` first:

1. moves `--model X` to the front as the positional model tag;
2. raises ValueError when `--served-model-name` is given without a
   positional model (and without `--config`);
3. spells option names with dashes (`--max_model_len` is `--max-model-len`,
   up to the first '.'), and turns `-O3`/`-O=3`/`-O 3` into
   `--optimization-level 3`;
4. folds dotted options (`--compilation-config.level 3`,
   `--json-arg.list+ a,b`) into one JSON argument per option, appended last.

`--config FILE` inserts the file's options; the file is not on the control
node, so it is left as an argument. Every rewritten word keeps the index of
the word it came from, so an error still points at what the lane wrote.
"""

from __future__ import annotations

import json
import re
from typing import Any

_MODEL = re.compile(r"^--model(=.+|$)")
_CONFIG = re.compile(r"^--config(=.+|$)")
_SERVED = re.compile(r"^--served[-_]model[-_]name(=.+|$)")
_NAME = re.compile(r"(?<=--)[^\.]*")
SERVED_WITHOUT_MODEL = (
    "`model` should be provided as the first positional argument when using `vllm serve`. "
    "i.e. `vllm serve <model> --<arg> <value>`."
)


def flexible_argv(args: list[str]) -> tuple[list[str], list[int]]:
    """The argv argparse sees after vLLM's rewrite, and for each word the index of its origin in `args`."""
    origin = list(range(len(args)))
    at = next((i for i, word in enumerate(args) if word.startswith("--model") and _MODEL.match(word)), None)
    if at is not None and (args[at] != "--model" or at + 1 < len(args)):
        tag, rest = (args[at + 1], at + 2) if args[at] == "--model" else (args[at].removeprefix("--model="), at + 1)
        args = [tag, *args[:at], *args[rest:]]
        origin = [at, *origin[:at], *origin[rest:]]
    if (
        args
        and args[0].startswith("-")
        and not any(_CONFIG.match(word) for word in args)
        and any(_SERVED.match(word) for word in args)
    ):
        raise ValueError(SERVED_WITHOUT_MODEL)
    words: list[str] = []
    origins: list[int] = []
    for i, word in enumerate(args):
        if word.startswith("--"):
            key, eq, value = word.partition("=")
            # Without '_' the rewrite leaves the word as it is: no regex for most words.
            dashed = _NAME.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) if "_" in key else key
            words.append(dashed + eq + value)
            origins.append(origin[i])
        elif word.startswith("-O") and word != "-O":
            words += ["--optimization-level", word[3:] if word[2:3] == "=" else word[2:]]
            origins += [origin[i], origin[i]]
        elif word == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            words.append("--optimization-level")
            origins.append(origin[i])
        else:
            words.append(word)
            origins.append(origin[i])
    return _fold_dotted(words, origins)


def _fold_dotted(words: list[str], origins: list[int]) -> tuple[list[str], list[int]]:
    if not any(word.startswith("-") and "." in word for word in words):
        return words, origins  # nothing dotted to fold: most lines
    drop: set[int] = set()
    folded: dict[str, dict[str, Any]] = {}
    first: dict[str, int] = {}
    for i, word in enumerate(words):
        if i in drop or not word.startswith("-") or "." not in word:
            continue
        if "=" in word:
            key, value = word.split("=", 1)
            if "." not in key:
                continue  # the '.' was in the value
        elif i + 1 < len(words):
            key, value = word, words[i + 1]
            drop.add(i + 1)
        else:
            continue
        if key.endswith("+"):
            key, value = key[:-1], json.dumps(value.split(","))
        name, *path = key.split(".")
        try:
            parsed: Any = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        for part in reversed(path):
            parsed = {part: parsed}
        _merge(folded.setdefault(name, {}), parsed)
        first.setdefault(name, origins[i])
        drop.add(i)
    out = [w for i, w in enumerate(words) if i not in drop]
    out_origins = [o for i, o in enumerate(origins) if i not in drop]
    for name, merged in folded.items():
        out += [name, json.dumps(merged)]
        out_origins += [first[name], first[name]]
    return out, out_origins


def _merge(into: dict[str, Any], update: Any) -> None:
    if not isinstance(update, dict):
        return
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value
