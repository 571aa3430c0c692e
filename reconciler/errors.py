"""One exception root, split by what the caller should do about it.

`TransientError` means "try again later" (a host that did not answer, a
registry that timed out); `PermanentError` means "this will not work until
something changes" (a missing image digest, a refused host key);
`InputError` means the user's files or arguments are wrong and names the
file, line and field so a person can fix them.
"""

from __future__ import annotations


class LanesError(Exception):
    """Root of every error lanes raises on purpose."""


class TransientError(LanesError):
    """A failure that may go away on its own: retry on the next cycle."""


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
