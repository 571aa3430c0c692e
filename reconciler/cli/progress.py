"""Progress of `lanes apply` and `lanes demo`: a step's start, then its end with how long it took.

In a terminal the steps under way are a live footer, one line each, updated in place with the time
they have taken so far (a model load takes minutes: the clock shows it is not stuck); when a step
ends its footer line gives way to one finished line (✓ done, ✗ failed) with its duration. In a pipe
or a log there is no footer: a step is a `…` line when it starts (a log must say what was under way
when a run stopped, and scripts wait for it) and a `✓`/`✗` line with its duration when it ends.
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from reconciler.execute.results import ProgressEvent

MARKS = {"done": "[green]✓[/]", "failed": "[red]✗[/]", "info": "·"}


class _Running:
    """The live footer: every step under way with its elapsed time, drawn anew at each refresh."""

    def __init__(self) -> None:
        self.steps: dict[tuple[str, str], tuple[float, str]] = {}

    def __rich__(self) -> Group:
        now = time.monotonic()
        return Group(
            *(
                Text.from_markup(f"[cyan]…[/] [bold]{escape(lane)}[/] {escape(step)}: {escape(detail)} ")
                + Text(f"({now - since:.0f} s)", style="dim")
                for (lane, step), (since, detail) in self.steps.items()
            )
        )


class StepPrinter:
    """A `ProgressFn` for the executor; use it as a context manager so the live footer is cleared."""

    def __init__(self, console: Console, *, live: bool | None = None) -> None:
        self.console = console
        self.t0 = time.monotonic()
        self.running = _Running()
        self.live = console.is_terminal if live is None else live
        self._live: Live | None = None

    def __enter__(self) -> StepPrinter:
        if self.live:
            self._live = Live(self.running, console=self.console, transient=True, refresh_per_second=4)
            self._live.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __call__(self, event: ProgressEvent) -> None:
        key = (event.lane, event.step)
        now = time.monotonic()
        if event.status == "started":
            self.running.steps[key] = (now, event.detail)
            if self._live is not None:
                self._live.refresh()
                return
            self._line(now, "…", event, "")
            return
        since, _ = self.running.steps.pop(key, (None, ""))
        took = f" [dim]({now - since:.1f} s)[/]" if since is not None else ""
        self._line(now, MARKS.get(event.status, "·"), event, took)
        if self._live is not None:
            self._live.refresh()

    def _line(self, now: float, mark: str, event: ProgressEvent, took: str) -> None:
        self.console.print(
            f"[dim]{now - self.t0:7.1f}s[/] {mark} [bold]{escape(event.lane)}[/] {escape(event.step)}: "
            f"{escape(event.detail)}{took}",
            highlight=False,
            soft_wrap=True,
        )
