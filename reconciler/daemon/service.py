"""`lanes daemon`: keep the fleet converged toward the newest commit, forever.

Kicks come from a local watch of the refs, a fetch every interval, the
webhook and a full resync on an interval; all of them land on one level
trigger, and the main loop reconciles once toward whatever the branch head is
at that moment. apscheduler runs the interval jobs on this loop (never two of
one job at once, each under a timeout). SIGTERM cancels the cycle in flight,
whose transaction puts the last healthy spec back; SIGHUP reloads the config.

What runs on the hosts only changes when the daemon can record it: while the
journal's disk refuses writes no cycle starts (it is retried every few
seconds). A remote that does not answer leaves the last fetched head in
charge; lanes blocked by another reconciler's lease are retried with backoff.
None of these stops the daemon; `reconciler.daemon.conditions` says them.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from reconciler.daemon.conditions import STORE_RETRY_S, Backoff, Retries, SourceHealth, store_status
from reconciler.daemon.config import DaemonConfig, load_config
from reconciler.daemon.decider import CommitDecider
from reconciler.daemon.experimentjob import ExperimentJob
from reconciler.daemon.gatewayjob import GatewayJob
from reconciler.daemon.healthjob import health_round
from reconciler.daemon.hookroute import DeliveryWindow
from reconciler.daemon.httpface import http_server
from reconciler.daemon.lookagain import retry_blocked, retry_specs, retry_windows
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.notify import Notifier
from reconciler.daemon.retentionjob import prune_journal
from reconciler.daemon.trialjob import make_trial
from reconciler.daemon.trigger import LANE_KICK, Trigger
from reconciler.daemon.upstreamjob import upstream_job
from reconciler.errors import LanesError
from reconciler.execute.cycle import CycleRunner
from reconciler.execute.operations import Operations
from reconciler.execute.secrets import lane_secrets, secret_values
from reconciler.logsetup import remember_secrets
from reconciler.notifications import hub as notifications
from reconciler.source.mirror import Mirror
from reconciler.source.watch import watch_refs
from reconciler.store.experiments import experiments
from reconciler.store.journal import Store
from reconciler.store.status import status_rows
from reconciler.transport.ssh import SSHTransport
from reconciler.upstream.ancestry import fix_ancestry

log = structlog.get_logger("lanes.daemon")
JOB_TIMEOUT_S = 600.0
FORCED = frozenset(
    {
        "resync",
        "start",
        "reload",
        "retry",
        "store-retry",
        "blocked-retry",
        "spec-retry",
        "window-retry",
        "operation",
        "reaction",
    }
)
"""Reasons that reconcile even when the head did not move (the hosts or the daemon's footing may have; an
operation that ended leaves lanes to plan: deferred behind it, or the newest spec after a preemption; a
commit's reaction acted on its changed lanes alone, and the full cycle follows it)."""
BACKGROUND = frozenset({"upstream", "experiments", "health"})
"""Reasons that start a background job of their own (`step`), never a cycle."""
OPERATIONS_STOP_S = 60.0
"""How long a shutdown waits for the operations it cancels to put their last healthy specs back (each restarts
without waiting for the engine to load): inside the unit's TimeoutStopSec=90s."""
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
        self.source = SourceHealth(config.repo.url)
        self.crash_backoff = Backoff()  # a crashed cycle's retries (blocked lanes follow their holds)
        self.retries = Retries(self.trigger.kick)
        self._store_down = False
        self.jobs: dict[str, asyncio.Task[None]] = {}
        """Long jobs running beside the loop (the upstream poll, trial branches), by name."""
        self.deliveries = DeliveryWindow(config.http.replay_window)  # signed webhook deliveries seen
        self._setup()

    def _setup(self) -> None:
        cfg = self.config
        self.store = Store(cfg.daemon.db, hold_writes=True)
        self.transport = SSHTransport(
            cfg.ssh.known_hosts,
            [cfg.ssh.key],
            max_concurrency=cfg.ssh.concurrency,
            connect_timeout=cfg.ssh.connect_timeout_s,
        )
        upstream_data = Path(cfg.repo.mirror_dir).parent / "upstream"  # where the upstream job keeps its mirrors
        self.runner = CycleRunner(
            self.transport,
            self.store,
            lane_secrets(cfg),
            cfg.cycle_settings(),
            ancestry=partial(fix_ancestry, data_dir=upstream_data),
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
            credential_file=cfg.repo.credential_file,
            notes_signing_key=cfg.evidence_key() if cfg.repo.require_signed_commits else None,
        )
        # Lane changes run as operations of their own: the loop never waits for a readiness gate. Trials on
        # spare hosts run beside them; one a commit ended leaves lanes to plan once it let go of its hosts.
        self.operations = Operations(on_trial_end=self._operation_ended)
        self.decider = CommitDecider(
            cfg,
            self.store,
            self.runner,
            self.mirror,
            self.metrics,
            self.operations,
            on_settled=self._operation_ended,
        )
        self.gateway = GatewayJob(
            cfg.gateway, self.store, lambda: self.decider.last_desired, self.runner.settings.overrides
        )
        if cfg.gateway.enabled:
            self.operations.inflight.routes = self.gateway  # drains and watches settle the routes through it

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.notifier.status(phase)

    # -- jobs ------------------------------------------------------------------

    async def fetch(self) -> str | None:
        try:
            head = await asyncio.to_thread(self.mirror.fetch)
        except LanesError as exc:
            self.source.failed(str(exc))
            self.metrics.record_fetch(ok=False)
            log.warning(
                "repo.fetch_failed",
                error=str(exc),
                url=self.config.repo.url,
                failures=self.source.failures,
                keeping=self.last_head,
            )
            return None
        down = self.source.succeeded()
        self.metrics.record_fetch(ok=True, when=self.source.last_success)
        if down is not None:
            log.info("repo.fetch_recovered", url=self.config.repo.url, down_s=round(down, 1), head=head)
        return head

    async def _fetch_job(self) -> None:
        head = await self.fetch()
        if head is not None and head != self.last_head:
            self.trigger.kick("fetch")

    async def _upstream_job(self) -> None:
        # Started by the main loop as a task of its own (`_background`): the loop goes on reacting while it polls.
        self.trigger.kick("upstream")

    async def _run_upstream(self) -> None:
        # Its trials run beside the cycles (`Operations.trial`): their lanes in flight, their hosts held.
        trial = make_trial(self.config, self.runner, self.mirror, self.decider, self.operations)
        try:
            async with asyncio.timeout(UPSTREAM_TIMEOUT_S):  # not wait_for: it can drop a cancel on 3.11
                await upstream_job(self.config, self.decider, self.mirror, self.metrics, trial)
        except (TimeoutError, LanesError) as exc:
            log.error("upstream.failed", error=str(exc) or "timed out")
        except Exception as exc:
            log.error("upstream.crashed", error=f"{type(exc).__name__}: {exc}", exc_info=True)

    async def _experiments_job(self) -> None:
        self.trigger.kick("experiments")  # started by the main loop as a task of its own, as the upstream job

    async def _run_experiments(self) -> None:
        job = ExperimentJob(self.config, self.decider, self.runner, self.mirror, self.store, self.operations)
        try:
            async with asyncio.timeout(UPSTREAM_TIMEOUT_S):
                await job.run()
        except (TimeoutError, LanesError) as exc:
            log.error("trial.job_failed", error=str(exc) or "timed out")
        except Exception as exc:
            log.error("trial.job_crashed", error=f"{type(exc).__name__}: {exc}", exc_info=True)

    async def step(self, reasons: set[str]) -> None:
        if reasons - BACKGROUND:  # a cycle's reasons are its own (a health round kicked with a resync is not one)
            await self.cycle(reasons - BACKGROUND)
        if "health" in reasons:  # in-sync lanes' engines, beside the cycles (`reconciler.daemon.healthjob`)
            self._background("health", partial(health_round, self.runner, self.operations, self.gateway.kick))
        if "upstream" in reasons and self.config.upstream.enabled:
            self._background("upstream", self._run_upstream)
        if "experiments" in reasons and self.config.experiments.enabled:
            self._background("experiments", self._run_experiments)

    def _background(self, name: str, job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run a long job (an upstream poll, trial branches) as a task of its own, under its own deadline
        (UPSTREAM_TIMEOUT_S, inside `job`): the loop reacts to a new head, a webhook or an operator meanwhile.
        One run of each at a time; a kick while it runs is dropped (the next interval polls again)."""
        running = self.jobs.get(name)
        if running is not None and not running.done():
            log.info("job.still_running", job=name)
            return
        self.jobs[name] = asyncio.create_task(job(), name=f"lanes-{name}")

    async def _stop_jobs(self) -> None:
        tasks = [t for t in self.jobs.values() if not t.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _gateway_job(self) -> None:
        self.gateway.kick()  # a restarted gateway forgot its workers: they are back within one interval

    async def _resync_job(self) -> None:
        self.trigger.kick("resync")

    async def _health_job(self) -> None:
        self.trigger.kick("health")  # the main loop starts the round as a background job (`step`)

    def _guarded(self, job: Callable[[], Awaitable[None]], name: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            try:
                async with asyncio.timeout(JOB_TIMEOUT_S):
                    await job()
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
        scoped = {r for r in reasons if r.startswith(LANE_KICK)}
        if head == self.last_head and not reasons & FORCED and not scoped:
            return
        if not self._store_ready():
            return
        # Only lanes an operator named (`lanes reconcile --lane`), unless anything else asks for a full cycle
        # (a new head, a resync, a retry...): a new head is always decided for every lane.
        full = head != self.last_head or bool(reasons - scoped - {"fetch"})
        only = None if full else frozenset(r.removeprefix(LANE_KICK) for r in scoped)
        self.set_phase(f"reconciling {head[:12]}" + (f" for {', '.join(sorted(only))}" if only else ""))
        t0 = time.monotonic()
        outcome = await self.decider.decide(head, only)
        self.last_cycle = {
            "commit": head,
            "outcome": outcome,
            "seconds": round(time.monotonic() - t0, 3),
            "reasons": sorted(reasons),
            "lanes": sorted(only) if only else None,
            "finished": time.time(),
        }
        self.gateway.kick()  # what the cycle observed or ended may change who serves
        if self.decider.reacted:
            self.trigger.kick("reaction")  # the changed lanes are under way: now every host and every lane
        if not self._store_ready():
            return  # records of this cycle are held: the head is reconciled again once they are written
        self.last_head = head
        self._retry_blocked()
        retry_specs(self.retries, self.store)
        retry_windows(self.retries, self.store)
        refused = self.decider.refused if outcome == "refused" else None
        busy = sorted(self.operations.busy() - self.operations.trials.lanes())  # trials: the jobs say them
        if busy:
            self.set_phase(f"idle at {head[:12]}: {outcome}, applying {', '.join(busy)}")
        else:
            self.set_phase(f"idle at {head[:12]}: {outcome}" + (f" ({refused['reason']})" if refused else ""))

    def _operation_ended(self, replan: bool) -> None:
        """An operation ended: its records may be held (a full disk), its failures may have set a backoff or met
        a lease; lanes may wait for it."""
        self.gateway.kick()  # a lane passed its gate, failed or stopped: its route follows
        if not self._store_ready():
            return  # said, and looked at again in a few seconds; that retry plans again too
        self._retry_blocked()
        retry_specs(self.retries, self.store)
        if replan:
            self.trigger.kick("operation")

    def _store_ready(self) -> bool:
        """Held records written and one more write taken; else say why, keep what runs, look again soon."""
        writable = self.store.writable(self.config.daemon.owner)
        self.metrics.set_store(writable=writable, held=self.store.held_writes)
        if writable:
            if self._store_down:
                log.info("store.recovered", db=str(self.store.path))
                self._store_down = False
            return True
        if not self._store_down:
            log.error("store.unwritable", db=str(self.store.path), error=self.store.problem, keeping=self.last_head)
            self._store_down = True
        applied = self.last_head[:12] if self.last_head else "nothing yet"
        self.set_phase(f"journal not writable, hosts keep what runs (last applied {applied})")
        self.retries.later("store-retry", STORE_RETRY_S)
        return False

    def _retry_blocked(self) -> None:
        self.crash_backoff.reset()  # a cycle ended: a crash before it is behind us
        retry_blocked(self.retries, self.store, self.decider.blocked)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        if self.install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
            loop.add_signal_handler(signal.SIGHUP, lambda: self.trigger.kick("reload"))
        self._recover()
        prune_journal(self.store, self.config.retention)  # at start, then every prune_interval_s
        scheduler = AsyncIOScheduler(event_loop=loop)
        jobs = [
            (self._prune_job, "prune", self.config.retention.prune_interval_s),
            (self._fetch_job, "fetch", self.config.repo.fetch_interval_s),
            (self._resync_job, "resync", self.config.repo.resync_interval_s),
            (self._health_job, "health", self.runner.health.tick_s or self.config.daemon.health_interval_s),
        ]
        if self.config.upstream.enabled:
            jobs.append((self._upstream_job, "upstream", self.config.upstream.interval_s))
        if self.config.experiments.enabled:
            jobs.append((self._experiments_job, "experiments", self.config.experiments.interval_s))
        if self.config.gateway.enabled:
            jobs.append((self._gateway_job, "gateway", self.config.gateway.interval_s))
        for job, name, seconds in jobs:
            # One run of a job at a time; runs missed while it ran are coalesced into one.
            scheduler.add_job(
                self._guarded(job, name), "interval", seconds=seconds, max_instances=1, coalesce=True, id=name
            )
        scheduler.start()
        # Sends from its own queues, never part of a cycle; every outcome is counted in /metrics.
        notifications.start(self.config.notifications, tally=self.metrics.record_notification)
        http = http_server(self)
        if http is not None:
            await http.start()
        await self.gateway.start()  # the holding answer's listener, before any change can need it
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
                try:
                    await self.cycle_task
                except asyncio.CancelledError:
                    pass
                except Exception as exc:
                    # A cycle that breaks costs that cycle, never the daemon: what runs stays, it is tried again.
                    log.exception("cycle.crashed", error=str(exc) or type(exc).__name__)
                    self.set_phase(f"last cycle failed: {exc}")
                    self.retries.later("blocked-retry", self.crash_backoff.next())
                self.cycle_task = None
        finally:
            self.notifier.stopping()
            self.set_phase("stopping")
            self.retries.cancel_all()
            scheduler.shutdown(wait=False)
            await self._stop_jobs()
            await self.gateway.stop()
            await self.operations.stop(OPERATIONS_STOP_S)
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            if http is not None:
                await http.close()
            await self.transport.close()
            await notifications.stop()
            if not self.store.flush():
                log.error("store.records_lost", db=str(self.store.path), held=self.store.held_writes)
            self.store.close()
        return 0

    def request_stop(self) -> None:
        log.info("daemon.stopping", phase=self.phase)
        self.stopping.set()
        self.trigger.kick("stop")
        if self.cycle_task is not None and not self.cycle_task.done():
            self.cycle_task.cancel()

    async def _prune_job(self) -> None:
        prune_journal(self.store, self.config.retention)

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
            self.runner.settings = new.cycle_settings()
            self.runner.secrets = lane_secrets(new)
            remember_secrets(secret_values(new))  # secrets added or changed since the start are redacted too
            self.decider.config = new
            self.gateway.settings = new.gateway  # the interval job is the start's; kicks follow the new file
            self.gateway.overrides = self.runner.settings.overrides
            notifications.reload(new.notifications)
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

    def status(self) -> dict[str, Any]:
        desired = self.decider.last_desired
        rows = status_rows(self.store, desired)
        self.metrics.update_from_status(rows)
        return {
            "phase": self.phase,
            "owner": self.config.daemon.owner,
            "head": self.last_head,
            "last_cycle": self.last_cycle,
            "store": store_status(self.store),
            "source": self.source.as_dict(),
            "blocked": dict(self.decider.blocked),
            "operations": self.operations.snapshot(),
            "trials_running": self.operations.trials.snapshot(),  # on spare hosts, holding them until cleaned up
            "jobs": sorted(
                [name for name, task in self.jobs.items() if not task.done()] + (["gateway"] * self.gateway.running)
            ),
            "gateway": self.gateway.last if self.config.gateway.enabled else None,
            "refused": self.decider.refused,
            "lanes": rows,
            # The newest trial branch heads tried (the comparison itself is on the pull request and the branch).
            "trials": [
                {k: t.get(k) for k in ("branch", "commit_sha", "state", "summary", "lanes", "evidence_commit", "pull")}
                for t in experiments(self.store, limit=10)
            ],
        }


async def run_daemon(config_path: Path) -> int:
    config = load_config(config_path)
    return await Daemon(config, config_path).run()
