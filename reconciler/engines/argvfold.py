"""Command lines that differ only in values argparse takes as they come are judged by argparse once.

A thousand lanes render a thousand different command lines (each its own `--port`,
`--served-model-name`, `--master-addr`), and argparse over one of vLLM's or SGLang's 300-500 flags
costs about 0.2 ms: 0.35 s of `lanes check` at 1,000 lanes (bench/README.md, issue 27). Yet the
verdict of argparse does not depend on a value that

- follows, as its own word (`--port 8001`) or after `=` (`--port=8001`), an option string the parser
  holds exactly, whose action stores what it is given (`nargs` unset, `?`, `+` or `*`), enforces no
  choices, and whose type converts the value without error (for `+` and `*`: each of the words that
  follow, up to the first that is not such a value), and
- does not start with one of the parser's prefix characters (so argparse reads it as an argument,
  never as an option, whatever it is), and stands before any `--`:

argparse 3.11 (`_parse_known_args`) classifies each word as an option or an argument before it
consumes any, and all it does afterwards follows from that pattern and from the option words: an
option string it holds exactly is always that option (`_parse_optional`'s first test), such an
action consumes the next argument word (`+` and `*`: every argument word up to the next option;
after `=`, that one value), and the only thing it does with a value is convert it. Replacing each
such value by one placeholder that converts too changes no word's class, so what argparse answered
for the folded line (accepted, its error sentence, the words it did not recognize) is what it
answers for every line that folds to it. No error sentence quotes a folded value: conversion and
choice errors are the only ones that quote a value, and a folded one has neither. Where an error
points in the line is found afterwards in the line itself (`engines.flags`).

Folding is off for a parser whose actions can swallow options (nargs `...` or `A...`) or that reads
arguments from files.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence

PLACEHOLDER = "0"
"""What a folded value becomes: it converts under every type the tables use (str, int, float, json)."""

Converter = Callable[[str], object]
Foldable = tuple[Converter, bool]
"""The converter argparse applies to each value of an option, and whether it takes every argument word
that follows (`+`, `*`) or one (unset, `?`)."""

MANY = ("+", "*")


def foldable(parser: argparse.ArgumentParser) -> dict[str, Foldable]:
    """Each option string whose values can be folded, and how."""
    actions = parser._actions
    if parser.fromfile_prefix_chars or any(a.nargs in (argparse.REMAINDER, argparse.PARSER) for a in actions):
        return {}
    out: dict[str, Foldable] = {}
    for action in actions:
        # A plain store: refused flags, store_const, flags taking a fixed count or with choices are not folded.
        if type(action) is not argparse._StoreAction or action.choices is not None:
            continue
        if action.nargs not in (None, "?", *MANY):
            continue
        convert = parser._registry_get("type", action.type, action.type)
        if not callable(convert) or not _converts(convert, PLACEHOLDER):
            continue
        for option in action.option_strings:
            out[option] = (convert, action.nargs in MANY)
    return out


def _converts(convert: Converter, value: str) -> bool:
    try:
        convert(value)
    except Exception:  # any failure: argparse would say something about this value, so it is not folded
        return False
    return True


def fold(
    words: Sequence[str], options: Mapping[str, Foldable], known: Mapping[str, object], prefix_chars: str
) -> tuple[str, ...]:
    """`words` with every foldable value replaced by PLACEHOLDER (`known`: all the parser's option strings)."""
    out = list(words)
    i, n = 0, len(out)
    while i < n:
        word = out[i]
        if word == "--":
            break  # what follows is an argument for argparse whatever it looks like: left as written
        how = options.get(word)
        i += 1
        if how is not None:
            convert, many = how
            while i < n and _plain(out[i], convert, prefix_chars):
                out[i] = PLACEHOLDER
                i += 1
                if not many:
                    break
        elif "=" in word and word[0] in prefix_chars and word not in known:
            option, _, value = word.partition("=")
            how = options.get(option)
            if how is not None and value and _converts(how[0], value):
                out[i - 1] = f"{option}={PLACEHOLDER}"
    return tuple(out)


def _plain(value: str, convert: Converter, prefix_chars: str) -> bool:
    return bool(value) and value[0] not in prefix_chars and _converts(convert, value)
