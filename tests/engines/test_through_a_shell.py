"""Property: every string a person can put in a lane reaches the host's argv literally through a real shell.

sshd hands the one command string SSH carries to the user's shell
(`$SHELL -c STRING`). So the check here is the real one: the exact string
`reconciler.transport` sends is run by dash (Debian's /bin/sh) and by bash,
with a PATH holding only recorders named after every program lanes runs
(`docker`, `sh`, `python3`). A recorder writes the argv it received; it
must equal the argv lanes built, item for item, and no canary file may
appear (any layer that pasted a field into a shell would run `touch`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.engines import render_lane
from reconciler.facts.commands import envfile_argv, lease_argv, probe_argv
from reconciler.facts.docker import run_argv
from reconciler.spec import FleetDefaults, Host, Lane, ModelSpec
from reconciler.transport.base import command_line
from tests.support.properties import examples

from .conftest import COMMIT, LaneFactory

pytestmark = pytest.mark.timeout(120)

SHELLS = [shell for shell in ("/bin/sh", "/bin/bash") if Path(shell).exists()]
PROGRAMS = ("docker", "sh", "python3")
CANARY = f"/tmp/lanes-shell-canary-{os.getpid()}"  # the file a leaked shell word would create


def attacks() -> list[str]:
    """Words each shell would act on: every one of them, run by a shell, creates the canary."""
    touch = f"touch {CANARY}"
    return [
        f"; {touch}",
        f"$({touch})",
        f"`{touch}`",
        f"' ; {touch} ; '",
        f'" ; {touch} ; "',
        f"\n{touch}\n",
        f"&& {touch} || {touch}",
        f"| {touch}",
        f"> {CANARY}",
        f"${{IFS}}{touch}",
        f"$'\\n'{touch}",
        "*",
        "~root",
        "!!",
        "{a,b}",
        "\\",
        "a\tb  c",
        "-e",
        "--privileged",
        "ü∂ 中文",
    ]


ATTACKS = attacks()
word = st.one_of(
    st.sampled_from(ATTACKS),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20),
    st.lists(st.sampled_from(ATTACKS), min_size=2, max_size=3).map("".join),
)
nonempty = word.filter(bool)
# `docker run -v` splits on ':' and the spec refuses '.'/'..' path segments: such paths are kept out here.
path_word = nonempty.filter(lambda s: ":" not in s and not {".", ".."} & set(s.split("/")))
env_name = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)
engines = st.sampled_from(
    [("sglang", "native"), ("vllm", "ray"), ("vllm", "native"), ("flare", "native"), ("generic", "native")]
)


@pytest.fixture(scope="module")
def recorders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A bin directory whose only programs write their argv, NUL-separated, to $ARGV_OUT."""
    bin_dir = tmp_path_factory.mktemp("recorders")
    for program in PROGRAMS:
        script = bin_dir / program
        # printf is a builtin of dash and bash, so nothing else on PATH is needed.
        # Each call appends one record: its argument count, its name, its arguments.
        script.write_text(f'#!/bin/sh\nprintf \'%s\\000\' "$#" {program} "$@" >> "$ARGV_OUT"\n')
        script.chmod(0o755)
    yield bin_dir
    shutil.rmtree(bin_dir, ignore_errors=True)


def arrive_as(shell: str, commands: list[list[str]], bin_dir: Path) -> list[list[str]]:
    """What the programs at the far end receive when `shell` runs the strings SSH carries, one per line."""
    out = bin_dir / "argv.out"
    out.unlink(missing_ok=True)
    done = subprocess.run(
        [shell, "-c", "\n".join(command_line(argv) for argv in commands)],
        env={"PATH": str(bin_dir), "ARGV_OUT": str(out), "HOME": str(bin_dir)},
        capture_output=True,
        timeout=10,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return records(out.read_bytes())


def records(raw: bytes) -> list[list[str]]:
    items = raw.decode("utf-8").split("\x00")
    assert items.pop() == ""  # every item ends with a NUL
    out = []
    while items:
        count = int(items[0])
        out.append(items[1 : count + 2])
        items = items[count + 2 :]
    return out


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    engine=engines,
    description=word,
    engine_version=nonempty,
    served=nonempty,
    args=st.lists(word, max_size=4),
    env=st.dictionaries(env_name, word, max_size=3),
    mount_source=path_word,
    mount_target=path_word,
    model_path=path_word,
    hf_cache=path_word,
    state_dir=path_word,
    owner=nonempty,
    # A leading '-' would be read as a docker option: the renderer refuses it (tested in test_spec).
    image_repo=path_word.filter(lambda s: "@" not in s and not s.startswith("-")),
    ranks=st.integers(min_value=1, max_value=3),
)
def test_every_lane_string_reaches_the_host_argv_literally(
    recorders: Path,
    make_lane: LaneFactory,
    model: ModelSpec,
    hosts: Mapping[str, Host],
    engine: tuple[str, str],
    description: str,
    engine_version: str,
    served: str,
    args: list[str],
    env: dict[str, str],
    mount_source: str,
    mount_target: str,
    model_path: str,
    hf_cache: str,
    state_dir: str,
    owner: str,
    image_repo: str,
    ranks: int,
) -> None:
    image = f"{image_repo}@sha256:{'b' * 64}"
    lane: Lane = make_lane(
        engine=engine[0],
        launcher=engine[1],
        description=description,
        engine_version=engine_version,
        image=image,
        hosts=[f"dgx{i}" for i in range(1, ranks + 1)],
        tp=ranks,
        args=args,
        env=env,
        served_model_name=served,
        mounts=[{"source": "/" + mount_source, "target": "/mnt/" + mount_target}],
        secrets=[{"name": "hf-token", "env": "HF_TOKEN"}],
    )
    fleet = FleetDefaults(hf_cache="/" + hf_cache, state_dir_on_host="/" + state_dir)
    checkpoint = model.model_copy(update={"path": "/" + model_path})
    specs = render_lane(lane, checkpoint, fleet, hosts, COMMIT)
    commands = [run_argv(spec) for spec in specs]
    commands += [envfile_argv(spec.env_file) for spec in specs if spec.env_file]
    lease = f"{fleet.state_dir_on_host}/lease"
    commands += [
        probe_argv([checkpoint.path], lease, fleet.state_dir_on_host),
        lease_argv("acquire", lease, owner, 300),
        lease_argv("release", lease, owner, 300),
    ]
    for shell in SHELLS:
        assert arrive_as(shell, commands, recorders) == commands, shell
    assert not Path(CANARY).exists()
    # Spot-check that the fields really were in the argv (so equality above covered them).
    head = commands[0]
    for value in (*args, f"{checkpoint.path}:{checkpoint.path}:ro", image):
        assert value in head
    for key, value in env.items():
        assert f"{key}={value}" in head


def test_the_recorder_does_see_a_pasted_word(recorders: Path) -> None:
    """The check above can fail: a field pasted into the string unquoted is split and runs the canary."""
    out = recorders / "argv.out"
    canary = Path(CANARY)
    canary.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    try:
        for shell in SHELLS:
            subprocess.run(
                [shell, "-c", f"docker run x; /usr/bin/touch {CANARY}"],
                env={"PATH": str(recorders), "ARGV_OUT": str(out)},
                check=False,
                timeout=10,
            )
            assert records(out.read_bytes()) == [["docker", "run", "x"]]
            out.unlink()
            assert canary.exists()
            canary.unlink()
    finally:
        canary.unlink(missing_ok=True)
