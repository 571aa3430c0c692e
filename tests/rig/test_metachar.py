"""Shell metacharacters in lane fields reach the container literally and run nothing on the host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.rig.fleet import converged, result_of, running, served_models
from tests.rig.machine import STANDIN_ARGS
from tests.rig.rig import Rig

pytestmark = [pytest.mark.rig, pytest.mark.timeout(300)]


def nasty(marker: Path) -> list[str]:
    """Strings a shell would act on: each would create `marker` if any layer pasted it into a shell."""
    return [
        f"a; touch {marker}",
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"it's \"quoted\" $(touch {marker}) 'x'",
        f"line one\nline two; touch {marker}\n",
        f"&& touch {marker} || touch {marker} | touch {marker} > {marker}",
        f"${{IFS}}touch${{IFS}}{marker}",
    ]


def test_metacharacters_reach_the_container_argv_env_and_mounts_literally(rig: Rig) -> None:
    marker = Path(f"/tmp/pwned-{rig.rig_id}")
    marker.unlink(missing_ok=True)
    words = nasty(marker)
    served = f"m;$(touch {marker})`touch {marker}`"
    args = [*STANDIN_ARGS, "--port", "8000", "--served-model-name", served, "--note", *words]
    env = {f"RIG_NASTY_{i}": word for i, word in enumerate(words)}
    source = rig.folder / f"mount $(touch {marker}); `touch {marker}` 'q' \"dq\"\nnewline"
    source.mkdir(parents=True)
    target = f"/mnt/odd $(touch {marker}); `touch {marker}` 'q' \"dq\""
    mounts = [{"source": str(source), "target": target, "read_only": True}]
    sha = rig.publish(
        {"odd": rig.lane("odd", ["rig3"], args=args, env=env, mounts=mounts, served=served)},
        f"a lane full of shell metacharacters; touch {marker}",
    )

    run = converged(rig)

    assert result_of(run, "odd")["result"] == "applied", run.describe()
    c = running(rig, "rig3")["lanes-odd-r0"]
    assert [c.path, *c.args] == args
    for name, value in env.items():
        assert f"{name}={value}" in c.env
    assert (str(source), target, False) in c.mounts
    assert c.labels["lanes.commit"] == sha
    assert served_models(rig.hosts["rig3"].address, 8000) == [served]
    # The docker wrapper on rig3 logged the argv it got from sshd: one item per lane field.
    runs = [json.loads(line)["argv"] for line in rig.hosts["rig3"].docker_log.read_text().splitlines()]
    started = [argv for argv in runs if argv[:1] == ["run"]]
    assert started and started[-1][-len(args) :] == args
    assert f"{source}:{target}:ro" in started[-1]
    # Nothing ran: not on the host (the filesystem is shared by every rig host), not in the image.
    assert not marker.exists()
    probe = rig.docker(
        "rig3", "exec", "lanes-odd-r0", "python3", "-c", f"import os; print(os.path.exists({str(marker)!r}))"
    )
    assert probe.stdout.strip() == "False"
