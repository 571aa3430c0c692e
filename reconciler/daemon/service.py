"""`lanes daemon`: keep the fleet converged toward the newest commit, forever.

Kicks come from a local watch of the refs, a fetch every interval, the
webhook and a full resync on an interval; all of them land on one level
trigger, and the main loop reconciles once toward whatever the branch head is
at that moment. apscheduler runs the interval jobs on this loop (never two of
one job at once, each under a timeout). SIGTERM cancels the cycle in flight,
whose transaction puts the last healthy spec back; SIGHUP reloads the config.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from reconciler.daemon.config import DaemonConfig, load_config
from reconciler.daemon.http import HttpServer
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.notify import Notifier
from reconciler.daemon.trialjob import make_trial
from reconciler.daemon.trigger import Trigger
from reconciler.daemon.upstreamjob import upstream_job
from reconciler.daemon.verdicts import CommitDecider
from reconciler.errors import LanesError
from reconciler.execute.cycle import Reconciler
from reconciler.execute.secrets import SecretStore
from reconciler.source.mirror import Mirror
from reconciler.source.watch import watch_refs
from reconciler.source.webhook import parse_push, verify_signature
from reconciler.store.journal import Store
from reconciler.store.status import status_rows
from reconciler.transport.ssh import SSHTransport

log = structlog.get_logger("lanes.daemon")
JOB_TIMEOUT_S = 600.0
UPSTREAM_TIMEOUT_S = 3600.0  # a trial loads a model on spare hosts: tens of minutes on a Spark


class Daemon:
    def __init__(
        self,
        config: DaemonConfig,
        config_path: Path | None = None,
        notifier: Notifier | None = None,
        *,
        install_signals: bool = True,
    ) -> None:
        self.install_signals = install_signals
        self.config = config
        self.config_path = config_path
        self.notifier = notifier or Notifier.from_env()
        self.trigger = Trigger()
        self.metrics = Metrics()
        self.stopping = asyncio.Event()
        self.cycle_task: asyncio.Task[None] | None = None
        self.last_head: str | None = None
        self.last_cycle: dict[str, Any] = {}
        self.phase = "starting"
        self._setup()

    def _setup(self) -> None:
        cfg = self.config
        self.store = Store(cfg.daemon.db)
        self.transport = SSHTransport(
            cfg.ssh.known_hosts,
            [cfg.ssh.key],
            max_concurrency=cfg.ssh.concurrency,
            connect_timeout=cfg.ssh.connect_timeout_s,
        )
        self.reconciler = Reconciler(
            self.transport, self.store, SecretStore(cfg.daemon.secrets_dir), cfg.cycle_settings()
        )
        # libgit2 cannot push to a local repository with a work tree; the git command can (notes only).
        local_worktree = cfg.repo.is_local and (Path(cfg.repo.url) / ".git").exists()
        self.mirror = Mirror(
            cfg.repo.url,
            cfg.repo.mirror_dir,
            cfg.repo.branch,
            ssh_key=cfg.ssh.key,
            known_hosts=cfg.ssh.known_hosts,
            transport="git" if local_worktree else "auto",
        )
        self.decider = CommitDecider(cfg, self.store, self.reconciler, self.mirror, self.metrics)

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.notifier.status(phase)

    # -- jobs ------------------------------------------------------------------

    async def fetch(self) -> str | None:
        try:
            head = await asyncio.to_thread(self.mirror.fetch)
        except LanesError as exc:
            log.warning("repo.fetch_failed", error=str(exc), url=self.config.repo.url)
            return None
        return head

    async def _fetch_job(self) -> None:
        head = await self.fetch()
        if head is not None and head != self.last_head:
            self.trigger.kick("fetch")

    async def _upstream_job(self) -> None:
        # Runs in the main loop, between reconciles: a trial lane must never meet a resync that would
        # see it as an orphan, nor an apply on the same hosts.
        self.trigger.kick("upstream")

    async def _run_upstream(self) -> None:
        trial = make_trial(self.config, self.reconciler, self.mirror)
        try:
            await asyncio.wait_for(
                upstream_job(self.config, self.decider.last_desired, self.mirror, self.metrics, trial),
                UPSTREAM_TIMEOUT_S,
            )
        except (TimeoutError, LanesError) as exc:
            log.error("upstream.failed", error=str(exc) or "timed out")

    async def step(self, reasons: set[str]) -> None:
        if reasons - {"upstream"}:
            await self.cycle(reasons)
        if "upstream" in reasons and self.config.upstream.enabled:
            self.set_phase("polling upstream")
            await self._run_upstream()

    async def _resync_job(self) -> None:
        self.trigger.kick("resync")

    def _guarded(self, job: Callable[[], Awaitable[None]], name: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            try:
                await asyncio.wait_for(job(), JOB_TIMEOUT_S)
            except TimeoutError:
                log.error("job.timeout", job=name, timeout_s=JOB_TIMEOUT_S)
            except LanesError as exc:
                log.error("job.failed", job=name, error=str(exc))

        return run

    # -- the loop --------------------------------------------------------------

    async def cycle(self, reasons: set[str]) -> None:
        if reasons & {"watch", "webhook", "start", "reload", "fetch"}:
            await self.fetch()
        head = self.mirror.head()
        if head is None:
            self.set_phase("waiting for the branch to exist")
            return
        force = bool(reasons & {"resync", "start", "reload", "retry"})
        if head == self.last_head and not force:
            return
        self.set_phase(f"reconciling {head[:12]}")
        t0 = time.monotonic()
        outcome = await self.decider.decide(head)
        self.last_head = head
        self.last_cycle = {
            "commit": head,
            "outcome": outcome,
            "seconds": round(time.monotonic() - t0, 3),
            "reasons": sorted(reasons),
            "finished": time.time(),
        }
        self.set_phase(f"idle at {head[:12]}: {outcome}")

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        if self.install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
            loop.add_signal_handler(signal.SIGHUP, lambda: self.trigger.kick("reload"))
        self._recover()
        scheduler = AsyncIOScheduler(event_loop=loop)
        scheduler.add_job(
            self._guarded(self._fetch_job, "fetch"),
            "interval",
            seconds=self.config.repo.fetch_interval_s,
            max_instances=1,
            coalesce=True,
            id="fetch",
        )
        scheduler.add_job(
            self._guarded(self._resync_job, "resync"),
            "interval",
            seconds=self.config.repo.resync_interval_s,
            max_instances=1,
            coalesce=True,
            id="resync",
        )
        if self.config.upstream.enabled:
            scheduler.add_job(
                self._guarded(self._upstream_job, "upstream"),
                "interval",
                seconds=self.config.upstream.interval_s,
                max_instances=1,
                coalesce=True,
                id="upstream",
            )
        scheduler.start()
        http = self._http()
        if http is not None:
            await http.start()
        await self.fetch()  # creates the mirror, which the watch needs to exist
        watcher = asyncio.create_task(self._watch()) if self.config.repo.watch else None
        self.trigger.kick("start")
        ready = False
        interval = self.notifier.watchdog_interval_s() or 5.0
        try:
            while not self.stopping.is_set():
                reasons = await self.trigger.wait(timeout=interval)
                self.notifier.watchdog()
                if "reload" in reasons:
                    self._reload()
                if self.stopping.is_set() or not reasons - {"stop"}:
                    continue
                self.cycle_task = asyncio.create_task(self.step(reasons))
                if not ready:
                    self.notifier.ready()
                    ready = True
                with contextlib.suppress(asyncio.CancelledError):
                    await self.cycle_task
                self.cycle_task = None
        finally:
            self.notifier.stopping()
            self.set_phase("stopping")
            scheduler.shutdown(wait=False)
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            if http is not None:
                await http.close()
            await self.transport.close()
            self.store.close()
        return 0

    def request_stop(self) -> None:
        log.info("daemon.stopping", phase=self.phase)
        self.stopping.set()
        self.trigger.kick("stop")
        if self.cycle_task is not None and not self.cycle_task.done():
            self.cycle_task.cancel()

    def _recover(self) -> None:
        """A previous process died mid-transaction: close its journal; the next cycle plans from what runs."""
        stale = self.store.in_flight()
        for lane in sorted({row["lane"] for row in stale}):
            log.warning("journal.in_flight", lane=lane, steps=[r["kind"] for r in stale if r["lane"] == lane])
            self.store.close_in_flight(lane, "the reconciler stopped during this step; replanned on restart")

    def _reload(self) -> None:
        if self.config_path is None:
            return
        self.notifier.reloading()
        try:
            new = load_config(self.config_path)
        except LanesError as exc:
            log.error("config.reload_failed", error=str(exc), path=str(self.config_path))
        else:
            self.config = new
            self.reconciler.settings = new.cycle_settings()
            self.decider.config = new
            log.info("config.reloaded", path=str(self.config_path))
        self.notifier.ready()

    async def _watch(self) -> None:
        paths = [Path(self.config.repo.mirror_dir)]
        if self.config.repo.is_local:
            paths.append(Path(self.config.repo.url))

        async def changed() -> None:
            self.trigger.kick("watch")

        try:
            await watch_refs(paths, changed, stop=self.stopping)
        except LanesError as exc:
            # Without the watch the interval fetch still catches every push, only later.
            log.error("watch.failed", error=str(exc), paths=[str(p) for p in paths])

    # -- http ------------------------------------------------------------------

    def _http(self) -> HttpServer | None:
        if not self.config.http.enabled:
            return None
        return HttpServer(
            self.config.http.listen,
            health=self._health,
            status=self.status,
            metrics=self._metrics,
            webhook=self._webhook,
        )

    def _health(self) -> tuple[bool, str]:
        return True, self.phase

    def status(self) -> dict[str, Any]:
        desired = self.decider.last_desired
        rows = status_rows(self.store, desired)
        self.metrics.update_from_status(rows)
        return {"phase": self.phase, "head": self.last_head, "last_cycle": self.last_cycle, "lanes": rows}

    def _metrics(self) -> tuple[bytes, str]:
        self.status()
        return self.metrics.render()

    async def _webhook(self, headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        secret_file = self.config.http.webhook_secret_file
        if secret_file is None:
            return 404, "webhook not configured"
        try:
            secret = secret_file.read_bytes().strip()
        except OSError as exc:
            log.error("webhook.secret_unreadable", path=str(secret_file), error=exc.strerror)
            return 503, "webhook secret unreadable"
        if not secret:
            # An empty key makes every HMAC forgeable: treat it as not configured.
            log.error("webhook.secret_empty", path=str(secret_file))
            return 503, "webhook secret is empty"
        if not verify_signature(headers, body, secret):
            log.warning("webhook.bad_signature")
            return 401, "bad signature"
        event = parse_push(headers, body)
        if event is None:
            return 202, "ignored: not a push"
        if event.ref != f"refs/heads/{self.config.repo.branch}":
            return 202, f"ignored: {event.ref} is not the watched branch"
        self.trigger.kick("webhook")
        return 202, "fetch scheduled"


async def run_daemon(config_path: Path) -> int:
    config = load_config(config_path)
    return await Daemon(config, config_path).run()
