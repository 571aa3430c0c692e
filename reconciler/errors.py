"""One exception root, split by what the reconciler does about it.

The split decides retries (as kopf's temporary/permanent errors do), so every
class below sits where its consequence is::

    LanesError
    ├── TransientError ........ try again after `delay_s`, backing off; the spec is not blamed
    │   ├── HostUnreachableError    a host did not answer, or the connection dropped
    │   ├── LeaseHeldError          another reconciler holds a host (execute/hostops.py)
    │   ├── PullFailedError         `docker pull` failed: registry down, network cut
    │   ├── HostFaultError          a rank's host stopped answering during the readiness gate
    │   ├── GpuBusyError            a process outside lanes still held a rank host's GPU
    │   ├── PushRejectedError       the remote refused a notes push: fetch, merge, push again
    │   │                           (source/mirror.py)
    │   ├── AnswerTooLargeError     an upstream's answer passed its size or time cap: that source
    │   │                           failed this poll (upstream/bounded.py)
    │   ├── WalkStoppedError        a history walk was stopped (its request ended or timed out)
    │   │                           (source/history.py)
    │   └── TrialDisplacedError     a lane of the newest commit uses a trial's spare host: the trial
    │                               is not started, or is ended (execute/trials.py)
    ├── PermanentError ........ will repeat until the lane or the host changes: the spec is condemned
    │   ├── RemoteCommandError      a host command exited non-zero (a `docker run` refused, ...)
    │   ├── HostKeyError            the host's key is not the pinned one
    │   ├── DigestMismatchError     the pulled image is not the pinned digest
    │   ├── ImageLacksLauncherError the image has not what the lane launches (`ray`, `vllm`, sglang)
    │   ├── ImageNeedsNewerDriverError the image's CUDA is newer than a rank host's driver supports
    │   ├── NotReadyError           the engine did not pass its readiness gate, every host answering
    │   └── UnverifiedCommitError   a commit the decider did not verify was about to be acted on
    │                               (daemon/gate.py): that commit is refused
    ├── InputError ............ a person's file or flag is wrong (file, line, field): the lane is denied
    │   └── ConfigError             every problem of a daemon settings file (daemon/config.py)
    ├── DaemonCallError ....... the daemon's control API did not answer or refused a CLI's call
    │                           (cli/daemonclient.py): said, with how to reach it
    └── StepFailedError ....... a lane transaction's step failed; wraps one of the above and says
        │                       whether old ranks were already stopped (then a rollback runs) and
        │                       whether it is transient (then the spec is retried after a backoff)
        ├── LeaseBlockedError       a host of the lane is leased by another reconciler: nothing was
        │                           touched; transient, the lane's health kept (execute/leases.py)
        └── StagingError            a model could not be staged on a host, before anything stopped;
                                    transient or not as its cause is (execute/stagetypes.py)

Every subclass of LanesError in lanes is drawn here (tests/test_error_tree.py checks it).

A transient failure of the same spec past `FLAP_LIMIT` times in a row is
treated as permanent: a host that reboots during every readiness gate must
not redeploy a lane forever (`reconciler.lane.retry_delay`).
"""

from __future__ import annotations


class LanesError(Exception):
    """Root of every error lanes raises on purpose."""


class TransientError(LanesError):
    """A failure that may go away on its own: retried after `delay_s`, with backoff."""

    delay_s: float = 30.0
    """The first wait before a retry; each further failure of the same spec doubles it."""


class PermanentError(LanesError):
    """A failure that will repeat until the input or the host changes."""


class InputError(LanesError):
    """Bad input from a person: a state file, a policy file, a flag.

    Carries where the problem is so the CLI can print it without a traceback.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.field = field
        super().__init__(self.describe())

    def describe(self) -> str:
        where = ""
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.message}"


class RemoteCommandError(PermanentError):
    """A command on a host exited non-zero; says where, what and why."""

    def __init__(self, host: str, argv: list[str], exit_status: int | None, stderr: str) -> None:
        self.host = host
        self.argv = list(argv)
        self.exit_status = exit_status
        self.stderr_tail = "\n".join(stderr.strip().splitlines()[-10:])
        status = "killed by signal" if exit_status is None else f"exit {exit_status}"
        shown = " ".join(self.argv[:6]) + (" ..." if len(self.argv) > 6 else "")
        super().__init__(f"{host}: `{shown}` failed ({status}): {self.stderr_tail or '(no stderr)'}")


class HostUnreachableError(TransientError):
    """A host did not answer within the timeout, or the connection dropped."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(f"{host}: unreachable: {reason}")


class HostKeyError(PermanentError):
    """A host presented a key that is not pinned in known_hosts: refused."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(f"{host}: host key refused: {reason}")


class PullFailedError(TransientError):
    """`docker pull` failed on a host: the registry or the link may be back at the next try."""

    def __init__(self, failed: RemoteCommandError) -> None:
        self.host = failed.host
        super().__init__(str(failed))  # the host, the command and what it said, as the command error has them


class HostFaultError(TransientError):
    """A rank's host stopped answering during the readiness gate: the host, not the spec, is in doubt."""

    delay_s = 60.0


class GpuBusyError(TransientError):
    """A rank host's GPU was still held when the lane's ranks were to start (old ranks already stopped)."""


class DigestMismatchError(PermanentError):
    """The image a host pulled does not carry the pinned digest."""


class ImageLacksLauncherError(PermanentError):
    """The pulled image lacks an executable or module the lane's ranks run."""


class ImageNeedsNewerDriverError(PermanentError):
    """The pulled image requires a CUDA the host's driver does not support (NVIDIA_REQUIRE_CUDA)."""


class NotReadyError(PermanentError):
    """The engine did not pass a stage of the readiness gate while every host answered."""


class StepFailedError(LanesError):
    """A step of a lane transaction failed.

    `touched` says whether old ranks were already stopped (then a rollback runs); `transient` whether
    the cause is a fault of the moment (the spec is retried after `delay_s`) rather than of the spec.
    """

    def __init__(
        self, step: str, message: str, *, touched: bool, transient: bool = False, delay_s: float = 0.0
    ) -> None:
        super().__init__(message)
        self.step = step
        self.touched = touched
        self.transient = transient
        self.delay_s = delay_s

    @classmethod
    def wrap(cls, step: str, errors: list[BaseException], *, touched: bool) -> StepFailedError:
        """One failure of a step over several hosts: transient only if every cause is."""
        transient = bool(errors) and all(isinstance(e, TransientError) for e in errors)
        delay = max((e.delay_s for e in errors if isinstance(e, TransientError)), default=0.0)
        # An error lanes did not raise on purpose (a bug, an OS error) is named by its type too.
        message = "; ".join(str(e) if isinstance(e, LanesError) else f"{type(e).__name__}: {e}" for e in errors)
        return cls(step, message, touched=touched, transient=transient, delay_s=delay)
