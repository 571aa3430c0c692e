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


def test_the_daemon_s_imports_leave_apprise_to_the_first_notification() -> None:
    code = (
        "import json, sys\n"
        "import reconciler.cli.main, reconciler.daemon.service\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {NOT_AT_START!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
