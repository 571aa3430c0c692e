"""rsync's output read as it comes (from a real local rsync), its -e quoting and its exit codes."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from reconciler.execute.rsync import (
    RSYNC_OPTIONS,
    RsyncOutput,
    exit_meaning,
    is_transient,
    remote_dest,
    rsh_string,
)
from tests.support.stagingworld import rsync_missing

pytestmark = pytest.mark.timeout(60)


@pytest.mark.skipif(rsync_missing(), reason="rsync is not installed")
def test_progress_names_and_bytes_sent_from_a_real_rsync(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(os.urandom(3_000_000))
    (src / "sub" / "b.bin").write_bytes(os.urandom(1_000_000))
    listing = tmp_path / "list"
    listing.write_text("a.bin\nsub/b.bin\n")
    argv = ["rsync", *RSYNC_OPTIONS, "--whole-file", f"--files-from={listing}", f"{src}/", f"{dst}/"]
    done = subprocess.run(argv, capture_output=True, timeout=30, check=True, env={**os.environ, "LC_ALL": "C"})

    out = RsyncOutput(frozenset({"a.bin", "sub/b.bin"}))
    for i in range(0, len(done.stdout), 7):  # in small chunks: lines split across reads
        out.feed(done.stdout[i : i + 7])
    out.close()

    assert out.bytes_done == 4_000_000
    assert out.current == "sub/b.bin"  # the last file begun
    assert out.bytes_sent is not None and 4_000_000 <= out.bytes_sent < 4_100_000
    assert (dst / "sub" / "b.bin").read_bytes() == (src / "sub" / "b.bin").read_bytes()


def test_a_cut_short_output_keeps_the_last_progress_and_file() -> None:
    out = RsyncOutput(frozenset({"x.safetensors", "y.safetensors"}))
    out.feed(b"x.safetensors\n\r          32768   0%    0.00kB/s    0:00:00  \r       10551296  21%    9.78MB/s")
    assert out.bytes_done == 32768 and out.current == "x.safetensors" and out.bytes_sent is None
    out.feed(b"    0:00:03  \r")
    assert out.bytes_done == 10551296


def test_rsh_string_quotes_words_rsync_would_split() -> None:
    argv = ["ssh", "-i", "/keys/my key", "-o", "UserKnownHostsFile=/a'b", "-p", "22"]
    said = rsh_string(argv)
    assert said == "ssh -i '/keys/my key' -o 'UserKnownHostsFile=/a''b' -p 22"
    # rsync's rule (doubled quote inside single quotes) read back: shlex with '' as an empty adjacent string
    assert [w.replace("'", "") for w in shlex.split(said.replace("''", "'\"'\"'"))] == [
        a.replace("'", "") for a in argv
    ]


def test_remote_dest_brackets_an_ipv6_address_and_ends_in_a_slash() -> None:
    assert remote_dest("root", "10.0.0.1", "/models/X") == "root@10.0.0.1:/models/X/"
    assert remote_dest("root", "fd00::1", "/models/X/") == "root@[fd00::1]:/models/X/"


def test_exit_codes_say_what_they_mean_and_whether_a_retry_may_help() -> None:
    assert exit_meaning(30) == "timeout in data send/receive"
    assert exit_meaning(23) == "partial transfer due to error"
    assert exit_meaning(None) == "killed by a signal"
    assert is_transient(30, "") and is_transient(12, "connection unexpectedly closed")
    assert not is_transient(23, "") and not is_transient(11, "No space left on device")
    assert not is_transient(255, "Host key verification failed.")
