"""What `lanes daemon` imports before its first cycle (issue 27: the daemon's peak RSS at 1,000 hosts).

Apprise is imported by the send only (`reconciler.notifications.receivers`): on top of the daemon's own
imports (93 MB of RSS on this machine) it is 2.5 MB, and its plugins, loaded at its first URL, 14.5 MB
more; a daemon with no receiver configured never needs them. Checked in a fresh interpreter, so a later
top-level import anywhere on the daemon's path cannot bring it back unseen.
"""

from __future__ import annotations

import json
import subprocess
import sys

NOT_AT_START = ("apprise",)
TERMINAL = ("rich", "pygments", "colorama", "better_exceptions")


def test_the_daemon_s_imports_leave_apprise_to_the_first_notification() -> None:
    code = (
        "import json, sys\n"
        "import reconciler.cli.main, reconciler.daemon.service\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {NOT_AT_START!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_daemon_s_process_leaves_out_what_only_a_terminal_uses() -> None:
    """structlog imports rich and pygments for its console renderer (4.5 MB of RSS): not in the daemon,
    whose output is JSON lines; another command's process still has them."""
    code = (
        "import json, sys\n"
        "sys.argv = ['lanes', *sys.argv[1:]]\n"
        "import reconciler.cli.main, reconciler.daemon.service, reconciler.logsetup\n"
        "loaded = sorted(m for m, v in sys.modules.items() if v is not None and m.split('.')[0] in "
        f"{TERMINAL!r})\n"
        "print(json.dumps(loaded))\n"
    )

    def loaded(command: str) -> list[str]:
        argv = [sys.executable, "-c", code, command]
        run = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 0, run.stderr
        return list(json.loads(run.stdout.strip().splitlines()[-1]))

    assert loaded("daemon") == []
    assert "rich" in loaded("status")


def test_a_usage_error_of_the_daemon_is_a_plain_message() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "reconciler.cli.main", "daemon", "--no-such-option"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "No such option: --no-such-option" in run.stderr
    assert "Traceback" not in run.stderr
