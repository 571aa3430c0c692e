"""Every exit code of every `lanes` command, in one place: the contract scripts and CI rely on.

The numbers follow the tools operators already script against:

* 2 is a usage error, as click (under typer) exits for an unknown option or a missing argument
  before any command runs (click `UsageError.exit_code = 2`, click 8.x `click/exceptions.py`);
  lanes uses it for every kind of bad input, so a 2 never means anything else.
* `lanes plan --exit-code` is terraform's `plan -detailed-exitcode` (0 no changes, 1 error,
  2 changes; https://developer.hashicorp.com/terraform/cli/commands/plan) with "changes pending"
  moved to 3, because 2 is already taken by click for usage errors: a CI job that reads 2 as
  "drift" would otherwise read a typo in its own flags as drift. Every error state, a blocked or
  unreachable host among them, is non-zero with or without `--exit-code`: an unreachable fleet is
  never "nothing to do".
* 130 is what a shell reports for a command ended by Ctrl-C (128 + SIGINT).
"""

from __future__ import annotations

OK = 0
"""Done; for `plan --exit-code`: no changes pending."""
FAILED = 1
"""The command ran and the answer is no: a policy deny (`check`, a denied or unplannable lane in
`plan`), a lane that failed, rolled back or was denied (`apply`), a throughput regression (`bench`),
a failed proposal (`propose`), a daemon that needs attention (`status --daemon`)."""
BAD_INPUT = 2
"""Bad input: a usage error, a state, policy or settings file that does not load, an unknown lane,
host or revision."""
CHANGES = 3
"""`plan --exit-code`: changes are pending (nothing is blocked)."""
BLOCKED = 4
"""A host did not answer (unreachable, refused login, wrong host key) or a lane is blocked (held by
another reconciler's lease, a failed spec not retried, a retry pending, host facts): lanes could
not find out or cannot act. `plan`, `apply` and `hosts` exit so, whatever else they found."""
UNAVAILABLE = 5
"""A service a command measures or asks did not answer usably: the endpoint `bench` drives, every
upstream source of `upstream --refresh`."""
NOT_CONFIRMED = 6
"""`apply` did not change anything because it was not confirmed: the answer was no, or there was
no terminal to ask (or `--json`) and no `--yes`."""
TIMED_OUT = 7
"""`wait` gave up: the lane was not healthy at the commit when --timeout ran out."""
INTERRUPTED = 130
"""Ctrl-C."""

TABLE: tuple[tuple[int, str, str], ...] = (
    (OK, "ok", "done; plan --exit-code: nothing pending"),
    (FAILED, "failed", "a deny, a lane not converged, a bench regression"),
    (BAD_INPUT, "bad input", "usage, a file that does not load, no such lane"),
    (CHANGES, "changes", "plan --exit-code: changes pending"),
    (BLOCKED, "blocked", "a host unreachable or a lane blocked"),
    (UNAVAILABLE, "unavailable", "bench endpoint or every upstream source down"),
    (NOT_CONFIRMED, "not confirmed", "apply not confirmed (no terminal: use --yes)"),
    (TIMED_OUT, "timed out", "wait: --timeout ran out first"),
    (INTERRUPTED, "interrupted", "Ctrl-C"),
)
"""(code, name, meaning): what `lanes --help` prints and the README's table repeats."""


def epilog() -> str:
    """The exit-code table for `lanes --help` (click keeps a paragraph marked with \\b unwrapped)."""
    lines = ["\b", "Exit codes (every command):"]
    lines += [f"  {code:<4}{name:<15}{meaning}" for code, name, meaning in TABLE]
    lines += [
        "",
        "\b",
        "With --json: one JSON object on stdout, errors too",
        '({"ok": false, "error": ..., "exit_code": N}); progress and warnings on stderr.',
    ]
    return "\n".join(lines)
