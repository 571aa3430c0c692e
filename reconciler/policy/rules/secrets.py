"""`secrets-by-name`: a credential never sits in a lane file.

Lane files are committed, pushed and shown in `git log`; a token pasted
into `env:` or `args:` leaks to everyone with read access, forever. Lanes
reference credentials under `secrets:` by name and the control node fills
them in. Findings name the key and a redacted hint, never the value, and
they stay denials for stopped lanes: the secret is in git either way.
"""

from __future__ import annotations

import re

from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context
from reconciler.spec.lane import Lane
from reconciler.spec.saferegex import compile_pattern

SHORT = 16
"""Values shorter than this show no prefix at all in the hint."""


def redact(value: str) -> str:
    """A hint that helps find the value without showing it: prefix of long values, and the length."""
    if len(value) < SHORT:
        return f"<redacted, {len(value)} characters>"
    return f"{value[:3]}…<redacted, {len(value)} characters>"


def _key_words(key: str, words: tuple[str, ...]) -> str | None:
    padded = f"_{key.upper()}_"
    for word in words:
        if f"_{word.upper()}_" in padded:
            return word
    return None


def _is_reference(value: str) -> bool:
    """Values that point at a secret instead of holding it: a path, an env expansion, nothing."""
    stripped = value.strip()
    return (
        not stripped or stripped.startswith(("/", "${", "$(")) or re.fullmatch(r"\$[A-Za-z_]\w*", stripped) is not None
    )


def check_secrets(ctx: Context, rule: RuleSettings) -> None:
    words = rule.strings("key_words")
    patterns = [compile_pattern(p) for p in rule.strings("value_patterns")]  # RE2: checked at load
    secret_args = set(rule.strings("secret_args"))
    # Each distinct text searched once: lanes repeat their env values and args (1,000 lanes, 16,000 searches).
    found: dict[str, bool] = {}

    def matches(text: str) -> bool:
        hit = found.get(text)
        if hit is None:
            hit = found[text] = any(p.search(text) for p in patterns)
        return hit

    for lane in ctx.desired.lanes.values():
        for key, value in sorted(lane.env.items()):
            credential = matches(value)
            word = None if credential else _key_words(key, words)
            if not credential and (word is None or _is_reference(value)):
                continue
            why = "looks like a credential" if credential else f"is a literal value of a {word} variable"
            _report(ctx, rule, lane, where=f"env {key}", why=why, value=value)
        for index, arg in enumerate(lane.args):
            flag, equals, inline = arg.partition("=")
            if flag in secret_args:
                if equals:
                    where, value = f"args[{index}] ({flag})", inline
                elif index + 1 < len(lane.args):
                    where, value = f"args[{index + 1}] (after {flag})", lane.args[index + 1]
                else:
                    continue
                if not _is_reference(value):
                    _report(ctx, rule, lane, where=where, why="is a credential flag's value", value=value)
            elif matches(arg):
                _report(ctx, rule, lane, where=f"args[{index}]", why="looks like a credential", value=arg)


def _report(ctx: Context, rule: RuleSettings, lane: Lane, *, where: str, why: str, value: str) -> None:
    ctx.report(
        rule,
        severity="deny",
        lane=lane,
        message=(
            f"{where} {why} ({redact(value)}); remove it from the lane file, store it on the control node "
            "and "
            "reference it under `secrets:` by name (name + env), then rotate it: it is in git history"
        ),
        detail={"where": where, "length": len(value)},
        stopped_softens=False,
    )
