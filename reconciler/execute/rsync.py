"""rsync for staging: the argv of one transfer, reading its output, and what its exit codes mean.

Every option below is from rsync(1) of rsync 3.2.7 (Ubuntu 24.04, the Sparks' OS) to 3.5.0 (Debian 12
backports, the rig), https://download.samba.org/pub/rsync/rsync.1, quoted by its name:

- `-a` (--archive): "-rlptgoD"; "when --files-from is specified ... -r is not implied", so only the listed
  files go, with their times and modes.
- `--copy-links` (-L): "the sender transforms each symlink ... into the referent item": an origin that is a
  Hugging Face cache snapshot holds links to blobs; a receiver must get the files, not dangling links.
- `--ignore-times` (-I): turns off the "quick check" that skips files of the same size and modification
  time. Every file we list is one the model check found wrong, and a byte flipped in place with its mtime
  put back passes the quick check; with -I rsync's delta algorithm still sends only the blocks that differ.
- `--partial-dir=.lanes-partial`: a file cut short is kept in that folder (relative: "in the destination
  file's directory") and used "as data to speed up the resumption"; the half-copied file never has its
  final name. A relative partial-dir also gets "a perishable exclude", so a sender never sends one.
- `--files-from=FILE`: "the exact list of files to transfer", relative to the source folder (implies
  --relative and --dirs).
- `--mkpath`: "create all missing path components of the destination path" (3.2.3+): a model's folder on
  a fresh host.
- `--no-inc-recursive`: the whole file list before the first byte, so progress2's percentage is of the
  whole transfer (incremental recursion "won't know the total number of files").
- `--info=progress2,name1`: progress2 prints the bytes of the whole transfer so far; name1 prints each
  file's name as its transfer begins (on the sending client, before its data: measured with 3.5.0), so a
  failure can say which file was in flight.
- `--stats`: "Total bytes sent is the count of all the bytes that rsync sent from the client side to the
  server side": the client always sends here (it runs on the sender), so that is the bytes on the wire.
- `--no-human-readable` (--no-h): numbers "as pure digits" (the default level 1 puts separators in,
  a comma or a period by locale).
- `--timeout=SECONDS`: "if no data is transferred for the specified time then rsync will exit" (exit 30):
  a cut link ends the transfer instead of hanging it.
- `-e COMMAND` (--rsh): the ssh command, given "as a single argument", words split on spaces, quoted with
  single quotes (a quote inside doubled).
- No `-z`: checkpoints do not compress and the CPU is the limit. No --whole-file: it is only the default
  for local-to-local copies, and it would throw partial-dir files away ("simply removed").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

PARTIAL_DIR = ".lanes-partial"

RSYNC_OPTIONS = (
    "-a",
    "--copy-links",
    "--ignore-times",
    f"--partial-dir={PARTIAL_DIR}",
    "--mkpath",
    "--no-inc-recursive",
    "--info=progress2,name1",
    "--stats",
    "--no-human-readable",
)

# rsync(1), EXIT VALUES; 255 is ssh's own failure ("ssh exits with ... 255 if an error occurred", ssh(1)),
# which rsync passes on when its remote shell could not start.
EXIT_MEANINGS = {
    1: "syntax or usage error",
    2: "protocol incompatibility",
    3: "errors selecting input/output files, directories",
    4: "requested action not supported",
    5: "error starting client-server protocol",
    6: "daemon unable to append to log-file",
    10: "error in socket I/O",
    11: "error in file I/O",
    12: "error in rsync protocol data stream",
    13: "errors with program diagnostics",
    14: "error in IPC code",
    15: "sibling process crashed",
    16: "sibling process was killed by a signal",
    19: "received SIGUSR1",
    20: "received SIGINT, SIGTERM, or SIGHUP",
    21: "some error returned by waitpid()",
    22: "error allocating core memory buffers",
    23: "partial transfer due to error",
    24: "partial transfer due to vanished source files",
    25: "the --max-delete limit stopped deletions",
    30: "timeout in data send/receive",
    35: "timeout waiting for daemon connection",
    127: "rsync not found on the sender",
    255: "ssh failed (connection refused or lost, host key or login refused)",
}

TRANSIENT_EXITS = frozenset({5, 10, 12, 16, 20, 30, 35, 255})
"""A link or a peer that went away: the next staging run may get through. The others (usage, file I/O on a
full disk, a vanished source) repeat until someone changes something."""

PERMANENT_STDERR = ("Host key verification failed", "Permission denied", "REMOTE HOST IDENTIFICATION HAS CHANGED")
"""ssh's words for a refusal that no retry cures, whatever exit code rsync turns them into."""


def exit_meaning(code: int | None) -> str:
    if code is None:
        return "killed by a signal"
    if code < 0:
        return f"killed by signal {-code}"
    return EXIT_MEANINGS.get(code, "unknown exit code")


def is_transient(code: int | None, stderr: str) -> bool:
    if any(words in stderr for words in PERMANENT_STDERR):
        return False
    return code is None or code < 0 or code in TRANSIENT_EXITS


def rsh_string(argv: Sequence[str]) -> str:
    """The -e value: words separated by spaces; a word with a space or a quote in single quotes."""
    out = []
    for word in argv:
        if word and not re.search(r"[\s'\"]", word):
            out.append(word)
        else:
            out.append("'" + word.replace("'", "''") + "'")
    return " ".join(out)


def remote_dest(user: str, address: str, path: str) -> str:
    """`user@host:path/` (an IPv6 address in brackets); the trailing slash: files go inside the folder."""
    host = f"[{address}]" if ":" in address else address
    return f"{user}@{host}:{path.rstrip('/')}/"


def rsync_argv(source: str, dest: str, *, files_from: str, rsh: str, io_timeout_s: int) -> list[str]:
    # `--`: what follows is the source and the destination, never an option, whatever they start with.
    return ["rsync", *RSYNC_OPTIONS, f"--timeout={io_timeout_s}", f"--files-from={files_from}", "-e", rsh,
            "--", source.rstrip("/") + "/", dest]  # fmt: skip


_PROGRESS = re.compile(r"^\s*(\d+)\s+\d+%")
_SENT = re.compile(r"^Total bytes sent: (\d+)")


@dataclass
class RsyncOutput:
    """What rsync's stdout said so far: bytes done (progress2), the file in flight (name1), bytes sent (stats).

    Fed in chunks as they arrive; progress lines end in a carriage return, names and stats in newlines.
    """

    files: frozenset[str]
    bytes_done: int = 0
    current: str | None = None
    bytes_sent: int | None = None
    _rest: str = field(default="", repr=False)

    def feed(self, chunk: bytes) -> None:
        text = self._rest + chunk.decode("utf-8", errors="replace")
        pieces = re.split(r"[\r\n]", text)
        self._rest = pieces.pop()
        for piece in pieces:
            self._line(piece)

    def close(self) -> None:
        if self._rest:
            self._line(self._rest)
            self._rest = ""

    def _line(self, line: str) -> None:
        progress = _PROGRESS.match(line)
        if progress:
            self.bytes_done = max(self.bytes_done, int(progress.group(1)))
            return
        sent = _SENT.match(line)
        if sent:
            self.bytes_sent = int(sent.group(1))
            return
        if line in self.files:
            self.current = line
