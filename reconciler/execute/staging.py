"""Staging: every rank host of a lane holds a model's manifest exactly, before any step stops a rank.

    report = await stage(targets, model, manifest, origin, key=..., known_hosts=..., transport=...,
                         parallel=4, progress=callback, lane="prod")

1. Check: each receiver (and a Spark origin) runs the model check (`reconciler/facts/modelcheck_script.py`)
   over the reconciler's SSH transport: which files are ok, missing, partial or wrong, and the free space.
2. Refuse: a receiver whose free space under the model's folder cannot take what it is to be sent is
   refused, with the figures, before the first byte moves (the policy denies it earlier, at plan time; this
   guard holds when staging is called without it).
3. Plan: `reconciler/plan/fanout.py` (the origin sends each byte about once; Sparks that hold the model
   feed the others over their data plane; up to `parallel` rsyncs into one receiver).
4. Copy, round by round: rsync on the control node for a folder there (`StageOrigin.local`), or rsync on the
   sending host reached with `ssh -A` through a private agent (`reconciler/execute/sshagent.py`) for an
   origin host or a Spark (`reconciler/execute/stagecmd.py`). Progress (bytes, rate, time left) per receiver.
5. Check again, as the files land: beside each receiver's copies a "follow" model check hashes every file
   once rsync has renamed it into place, so after the last byte only the last files are left to hash; a
   receiver is whole (and may feed others) only once that check says so, and a file still wrong fails the
   staging naming the host, the file and the sender.

A failure raises `StagingError` (a `StepFailedError` of step "stage", never touched: nothing was stopped),
transient when a retry may get through (a host that did not answer, a cut link, rsync's timeout), naming
the host and the file. Whatever a cut left in rsync's partial folder is used by the next run. Every
subprocess has a deadline and is killed with its process group when it passes or on cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from reconciler.errors import LanesError, TransientError
from reconciler.execute.localorigin import verify_local_files
from reconciler.execute.rsync import RsyncOutput, exit_meaning, is_transient
from reconciler.execute.sshagent import agent_env, private_agent
from reconciler.execute.stagecmd import (
    StageHost,
    keygen_find_argv,
    local_env,
    local_rsync_argv,
    pinned_lines,
    relay_command,
)
from reconciler.execute.stagetypes import (
    CONTROL_NODE,
    ManifestLike,
    Receiving,
    StageOrigin,
    StageProgress,
    StageReport,
    StagingError,
    mib,
    space_needed,
)
from reconciler.execute.subproc import SubprocessTimeoutError, run_streaming
from reconciler.facts.modelcheck import (
    ModelCheck,
    check_input,
    follow_input,
    modelcheck_argv,
    needed,
    parse_model_check,
)
from reconciler.plan.fanout import Transfer, plan_fanout
from reconciler.transport.base import Transport

__all__ = [
    "CONTROL_NODE",
    "StageHost",
    "StageOrigin",
    "StageProgress",
    "StageReport",
    "StagingError",
    "space_needed",
    "stage",
]

MIN_RATE_BPS = 10e6
"""Deadlines assume at least this rate: a transfer or a check slower than 10 MB/s is killed as stuck."""


class _Stager:
    def __init__(self, targets: Mapping[str, StageHost], model: str, manifest: ManifestLike, origin: StageOrigin,
                 *, key: Path, known_hosts: Path, transport: Transport, parallel: int,
                 progress: Callable[[StageProgress], None] | None, lane: str | None, io_timeout_s: int,
                 check_workers: int, pairs: Sequence[tuple[str, str]] | None) -> None:  # fmt: skip
        self.targets = dict(targets)
        self.model = model
        self.manifest = manifest
        self.files = {f.path: f for f in manifest.files}
        self.sizes = {p: f.size for p, f in self.files.items()}
        self.origin = origin
        self.key = key
        self.known_hosts = known_hosts
        self.transport = transport
        self.parallel = parallel
        self.progress = progress
        self.lane = lane
        self.io_timeout_s = io_timeout_s
        self.check_workers = check_workers
        self.pairs = pairs
        self.hosts: dict[str, StageHost] = dict(targets)
        if origin.host is not None:
            self.hosts[origin.name] = origin.host
        self.sent_by: dict[str, int] = {}
        self.received_by: dict[str, int] = {}
        self.copied: dict[str, list[str]] = {}
        self.checks: dict[str, ModelCheck] = {}
        self.agent: str | None = None
        self.phases = {"check": 0.0, "agent": 0.0, "copy": 0.0, "verify": 0.0}
        self._keys: dict[str, str] = {}
        self._local_checked: asyncio.Task[None] | None = None

    # ---- checks ----------------------------------------------------------------------------------

    def _check_timeout(self, nbytes: int) -> float:
        return 60.0 + nbytes / MIN_RATE_BPS

    async def check(self, host: StageHost, paths: Sequence[str] | None = None, *, follow_s: float = 0.0
                    ) -> ModelCheck:  # fmt: skip
        """The model check of `paths` (default: every file) on `host`; with `follow_s`, one that hashes each file
        as the copy running meanwhile renames it into place, for at most that long, then answers."""
        listed = [(f.path, f.size, f.sha256) for f in self.files.values() if paths is None or f.path in paths]
        if follow_s:
            before = self.checks[host.name].files
            stdin = follow_input(host.root, listed, before=before, workers=self.check_workers, deadline_s=follow_s)
        else:
            stdin = check_input(host.root, listed, workers=self.check_workers)
        timeout = follow_s + self._check_timeout(sum(size for _, size, _ in listed))
        try:
            result = await self.transport.run(host.target, modelcheck_argv(), input=stdin, timeout=timeout)
            return parse_model_check(result.stdout)
        except LanesError as exc:
            raise StagingError(f"{host.name}: model check of {self.model} under {host.root} failed: {exc}",
                               host=host.name, transient=isinstance(exc, TransientError)) from exc  # fmt: skip
        except ValueError as exc:
            raise StagingError(f"{host.name}: model check of {self.model}: {exc}", host=host.name,
                               transient=False) from exc  # fmt: skip

    async def check_all(self, hosts: Sequence[StageHost]) -> dict[str, ModelCheck]:
        results = await asyncio.gather(*(self.check(h) for h in hosts), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            _raise_first(errors)
        return {h.name: r for h, r in zip(hosts, results, strict=True) if isinstance(r, ModelCheck)}

    def refuse_short_disks(self, checks: Mapping[str, ModelCheck]) -> None:
        short = []
        for name, check in sorted(checks.items()):
            need = space_needed(check, self.sizes)
            if need and check.free_bytes is not None and need > check.free_bytes:
                short.append((name, need, check.free_bytes, check.root))
        if short:
            said = "; ".join(f"{n} needs {need} bytes ({mib(need)}) under {root} and has {free} free ({mib(free)})"
                             for n, need, free, root in short)  # fmt: skip
            raise StagingError(f"not enough disk to stage {self.model}, nothing copied: {said}", host=short[0][0],
                               transient=False)  # fmt: skip

    # ---- plan and rounds ---------------------------------------------------------------------------

    def talking_pairs(self) -> list[tuple[str, str]]:
        if self.pairs is not None:
            return list(self.pairs)
        sparks = sorted(n for n in self.hosts if n in self.targets or self.origin.spark)
        planes = [n for n in sparks if self.hosts[n].data_address]
        pairs = [(a, b) for i, a in enumerate(planes) for b in planes[i + 1 :]]
        if self.origin.spark:  # an origin reaches every host, on its SSH address at least
            pairs += [(self.origin.name, n) for n in self.targets if n != self.origin.name]
        return pairs

    async def run(self) -> StageReport:
        started = time.monotonic()
        to_check = list(self.targets.values())
        if self.origin.spark and self.origin.host is not None and self.origin.name not in self.targets:
            to_check.append(self.origin.host)
        checks = await self.check_all(to_check)
        self.phases["check"] = time.monotonic() - started
        if self.origin.spark and not checks[self.origin.name].complete:
            wrong = needed(checks[self.origin.name])
            raise StagingError(f"{self.origin.name}: the origin of {self.model} does not hold it: "
                               f"{len(wrong)} files missing or wrong under {self.origin.path} ({', '.join(wrong[:3])})",
                               host=self.origin.name, file=wrong[0], transient=False)  # fmt: skip
        receivers = {n: c for n, c in checks.items() if n in self.targets}
        self.checks.update(receivers)
        self.refuse_short_disks(receivers)
        holders = [n for n, c in checks.items() if c.complete]
        needs = {n: {p: self.sizes[p] for p in needed(c)} for n, c in receivers.items() if not c.complete}
        plan = plan_fanout(needs, holders=holders, origin=None if self.origin.spark else self.origin.name,
                           pairs=self.talking_pairs(), parallel=self.parallel)  # fmt: skip
        if plan.unreachable:
            raise StagingError(f"{', '.join(plan.unreachable)}: no host holding {self.model} can reach it",
                               host=plan.unreachable[0], transient=False)  # fmt: skip
        async with contextlib.AsyncExitStack() as stack:
            if any(t.sender != CONTROL_NODE for r in plan.rounds for t in r):
                lifetime = int(sum(self._transfer_timeout(t) for r in plan.rounds for t in r) + 600)
                t0 = time.monotonic()
                self.agent = await stack.enter_async_context(private_agent(self.key, lifetime_s=lifetime))
                self.phases["agent"] = time.monotonic() - t0
            for round_ in plan.rounds:
                await self.run_round(round_)
        return StageReport(model=self.model, plan=plan, sent_by=dict(self.sent_by),
                           received_by=dict(self.received_by),
                           copied={r: tuple(sorted(f)) for r, f in self.copied.items()}, checks=dict(self.checks),
                           seconds=time.monotonic() - started, phases=dict(self.phases))  # fmt: skip

    async def run_round(self, transfers: Sequence[Transfer]) -> None:
        by_receiver: dict[str, list[Transfer]] = {}
        for t in transfers:
            by_receiver.setdefault(t.receiver, []).append(t)
        results = await asyncio.gather(*(self.receive(r, ts) for r, ts in sorted(by_receiver.items())),
                                       return_exceptions=True)  # fmt: skip
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            _raise_first(errors)
        # The round lasts as long as its slowest receiver's copy, then its slowest check.
        for i, phase in enumerate(("copy", "verify")):
            self.phases[phase] += max(r[i] for r in results if not isinstance(r, BaseException))

    async def receive(self, receiver: str, transfers: Sequence[Transfer]) -> tuple[float, float]:
        """Run one receiver's transfers of a round at once, its files checked as they land; (copy, tail) seconds.

        The check runs beside the copies ("follow"), hashing each file once rsync has renamed it into place,
        so after the last byte only the last files are left to hash, not the whole model."""
        started = time.monotonic()
        host = self.targets[receiver]
        paths = sorted({f for t in transfers for f in t.files})
        follow_s = max(self._transfer_timeout(t) for t in transfers) + 60.0
        if len(transfers) > 1:
            # Several rsyncs into one fresh folder race to make it: rsync 3.5.0's --mkpath fails the one that
            # loses ("mkdir ... failed: File exists", seen under load). Made once first; best effort, as
            # --mkpath still makes it when this could not.
            with contextlib.suppress(LanesError, OSError):
                await self.transport.run(host.target, ["mkdir", "-p", "--", host.root], timeout=30.0, check=False)
        follower = asyncio.create_task(self.check(host, paths, follow_s=follow_s))
        state = Receiving(receiver, sum(t.bytes for t in transfers), self.lane, self.progress)
        outputs = [RsyncOutput(frozenset(t.files)) for t in transfers]
        state.outputs.extend(outputs)
        try:
            runs = [self.transfer(t, o, state) for t, o in zip(transfers, outputs, strict=True)]
            results = await asyncio.gather(*runs, return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            if errors:
                _raise_first(errors)
        except BaseException:
            await _cancelled(follower)
            raise
        state.tick(final=True)
        self.copied.setdefault(receiver, []).extend(f for t in transfers for f in t.files)
        if self.progress is not None:
            self.progress(StageProgress(self.lane, receiver, state.total, state.total, 0.0, None, phase="verify"))
        copied = time.monotonic()
        try:
            async with asyncio.timeout(self._check_timeout(state.total)):
                landed = await asyncio.shield(follower)
        except (TimeoutError, StagingError):
            # A file the copy did not replace is never "landed": ask again, plainly.
            await _cancelled(follower)
            landed = await self.check(host, paths)
        before = self.checks[receiver]  # the files it was not sent were verified by the first check
        check = ModelCheck(landed.root, landed.exists, landed.free_bytes, {**before.files, **landed.files},
                           landed.hashed, landed.errors)  # fmt: skip
        self.checks[receiver] = check
        wrong = needed(check)
        if wrong:
            first = wrong[0]
            got, want = check.files[first], self.sizes[first]
            senders = ", ".join(sorted({t.sender for t in transfers}))
            what = "its sha256 differs from the manifest's" if got.state == "mismatch" else f"it is {got.state}"
            raise StagingError(
                f"{receiver}: {self.model} file {first} is wrong after the copy from {senders}: {got.size} of "
                f"{want} bytes, {what}" + (f" (and {len(wrong) - 1} more files)" if len(wrong) > 1 else ""),
                host=receiver,
                file=first,
                transient=False,
            )
        return copied - started, time.monotonic() - copied

    def _transfer_timeout(self, t: Transfer) -> float:
        return 120.0 + t.bytes / MIN_RATE_BPS

    async def receiver_keys(self, host: StageHost) -> str:
        """Our known_hosts lines for `host`, to travel with a host-to-host transfer."""
        if host.name not in self._keys:
            # ssh-keygen -F exits 1 when nothing matches: no lines either way.
            lines = pinned_lines(await _stdout_of(keygen_find_argv(host.pinned_name, self.known_hosts)))
            if not lines:
                raise StagingError(f"{host.name}: no host key pinned for {host.pinned_name} in {self.known_hosts}",
                                   host=host.name, transient=False)  # fmt: skip
            self._keys[host.name] = lines
        return self._keys[host.name]

    async def transfer(self, t: Transfer, out: RsyncOutput, state: Receiving) -> None:
        receiver = self.targets[t.receiver]
        timeout = self._transfer_timeout(t)

        def on_stdout(chunk: bytes) -> None:
            out.feed(chunk)
            state.tick()

        if t.sender == CONTROL_NODE:
            await self._local_files_checked()
        try:
            if t.sender == CONTROL_NODE:
                with tempfile.TemporaryDirectory(prefix="lanes-stage-") as folder:
                    listing = Path(folder) / "files"
                    listing.write_text("".join(p + "\n" for p in t.files))
                    argv = local_rsync_argv(self.origin.path, receiver, listing, key=self.key,
                                            known_hosts=self.known_hosts, io_timeout_s=self.io_timeout_s)  # fmt: skip
                    done = await run_streaming(argv, timeout=timeout, on_stdout=on_stdout, env=local_env())
            else:
                sender = self.hosts[t.sender]
                source = self.origin.path if t.sender == self.origin.name else sender.root
                assert self.agent is not None
                cmd = relay_command(sender, source, receiver, t.files, key=self.key, known_hosts=self.known_hosts,
                                    receiver_keys=await self.receiver_keys(receiver),
                                    io_timeout_s=self.io_timeout_s)  # fmt: skip
                done = await run_streaming(cmd.argv, timeout=timeout, on_stdout=on_stdout, stdin_text=cmd.stdin,
                                           keep_stdin_open=True, env=agent_env(self.agent))  # fmt: skip
        except SubprocessTimeoutError as exc:
            out.close()
            self._count(t, out)
            raise StagingError(f"{t.receiver}: copying {self.model} from {t.sender}: {exc}{self._at(out)}",
                               host=t.receiver, file=out.current, transient=True) from exc  # fmt: skip
        out.close()
        self._count(t, out)
        if done.returncode != 0:
            tail = " ".join(done.stderr.strip().splitlines()[-3:]) or "(no stderr)"
            code = done.returncode
            raise StagingError(
                f"{t.receiver}: copying {self.model} from {t.sender} failed: rsync exit {code} "
                f"({exit_meaning(code)}){self._at(out)}: {tail}",
                host=t.receiver,
                file=out.current,
                transient=is_transient(code, done.stderr),
            )

    async def _local_files_checked(self) -> None:
        """The control node's files against the manifest, once, before the first byte leaves for a Spark.

        Hashing on the receivers happens only after the bytes landed; a folder on the control node could
        hold anything by then (execute.localorigin). In a thread: hashing a checkpoint takes minutes.
        """
        if self._local_checked is None:
            folder, receiver = Path(self.origin.path), next(iter(self.targets))
            root = Path(self.origin.root) if self.origin.root is not None else None
            self._local_checked = asyncio.ensure_future(
                asyncio.to_thread(verify_local_files, folder, self.manifest, model=self.model, host=receiver, root=root)
            )
        await asyncio.shield(self._local_checked)

    def _at(self, out: RsyncOutput) -> str:
        if out.current is None:
            return ""
        return f" while sending {out.current} ({out.bytes_done} bytes of the transfer done)"

    def _count(self, t: Transfer, out: RsyncOutput) -> None:
        # A transfer cut short printed no stats: what progress2 saw is the best figure there is.
        sent = out.bytes_sent if out.bytes_sent is not None else out.bytes_done
        self.sent_by[t.sender] = self.sent_by.get(t.sender, 0) + sent
        self.received_by[t.receiver] = self.received_by.get(t.receiver, 0) + sent


async def _cancelled(task: asyncio.Task[ModelCheck]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, LanesError):
        await task


async def _stdout_of(argv: Sequence[str]) -> str:
    chunks: list[bytes] = []
    await run_streaming(argv, timeout=30.0, on_stdout=chunks.append)
    return b"".join(chunks).decode(errors="replace")


def _raise_first(errors: Sequence[BaseException]) -> None:
    """Raise the first staging error, saying the others; a bug (not a LanesError) goes up as it is."""
    for exc in errors:
        if not isinstance(exc, LanesError):
            raise exc
    first = errors[0]
    if len(errors) == 1:
        raise first
    assert isinstance(first, StagingError | LanesError)
    rest = "; ".join(dict.fromkeys(str(e) for e in errors[1:] if str(e) != str(first)))
    if not rest:  # the same failure met by every transfer (the origin's files checked once): said once
        raise first
    host = first.host if isinstance(first, StagingError) else "?"
    file = first.file if isinstance(first, StagingError) else None
    transient = all((isinstance(e, StagingError) and e.transient) or isinstance(e, TransientError) for e in errors)
    raise StagingError(f"{first}; also: {rest}", host=host, file=file, transient=transient) from first


async def stage(
    targets: Mapping[str, StageHost],
    model: str,
    manifest: ManifestLike,
    origin: StageOrigin,
    *,
    key: Path,
    known_hosts: Path,
    transport: Transport,
    parallel: int = 4,
    progress: Callable[[StageProgress], None] | None = None,
    lane: str | None = None,
    io_timeout_s: int = 60,
    check_workers: int = 4,
    pairs: Sequence[tuple[str, str]] | None = None,
) -> StageReport:
    """Make every host of `targets` hold `manifest`'s files under its `root`, from `origin`.

    `pairs`: Sparks that can reach each other's sshd (default: those that both have a data-plane address);
    `io_timeout_s`: rsync's and ssh's stall limit (a cut link fails within about this long).
    """
    stager = _Stager(targets, model, manifest, origin, key=key, known_hosts=known_hosts, transport=transport,
                     parallel=parallel, progress=progress, lane=lane, io_timeout_s=io_timeout_s,
                     check_workers=check_workers, pairs=pairs)  # fmt: skip
    return await stager.run()
