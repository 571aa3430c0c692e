"""The container spec: hash stability, labels, mounts, secrets, and what the renderer refuses."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from reconciler.engines import (
    ContainerSpec,
    RankContext,
    compute_spec_hash,
    container_name,
    render_lane,
    render_rank,
)
from reconciler.engines.fabric import lane_network
from reconciler.engines.ports import LanePorts
from reconciler.errors import InputError
from reconciler.facts.docker import run_argv
from reconciler.spec import FleetDefaults, Host, Lane, ModelSpec

from .conftest import COMMIT, MODEL_PATH, LaneFactory, Renderer

pytestmark = pytest.mark.timeout(30)

ENGINES = [
    ("sglang", "native"),
    ("vllm", "ray"),
    ("vllm", "native"),
    ("flare", "native"),
    ("generic", "native"),
]


def _hashes(specs: list[ContainerSpec]) -> list[str]:
    return [s.spec_hash for s in specs]


@pytest.mark.parametrize(("engine", "launcher"), ENGINES)
def test_a_new_commit_alone_changes_no_hash(
    make_lane: LaneFactory, render: Renderer, engine: str, launcher: str
) -> None:
    lane = make_lane(engine=engine, launcher=launcher)
    first, second = render(lane, "1" * 40), render(lane, "2" * 40)
    assert _hashes(first) == _hashes(second)
    assert [s.label("lanes.commit") for s in second] == ["2" * 40] * 4
    assert all(run_argv(a) != run_argv(b) for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize(("engine", "launcher"), ENGINES)
@pytest.mark.parametrize(
    "change",
    [
        {"image": "registry.example/engine@sha256:" + "b" * 64},
        {"args": ["--trust-remote-code"]},
        {"env": {"FOO": "baz"}},
        {"hosts": ["dgx4", "dgx5", "dgx6", "dgx7"]},
        {"port": 8001},
        {"secrets": []},
    ],
    ids=["image", "args", "env", "hosts", "port", "secrets"],
)
def test_what_runs_changes_every_hash_of_the_head(
    make_lane: LaneFactory, render: Renderer, engine: str, launcher: str, change: dict[str, object]
) -> None:
    base = render(make_lane(engine=engine, launcher=launcher))
    changed = render(make_lane(engine=engine, launcher=launcher, **change))
    assert base[0].spec_hash != changed[0].spec_hash


@pytest.mark.parametrize(("engine", "launcher"), ENGINES)
def test_a_different_model_changes_the_hash(
    make_lane: LaneFactory,
    model: ModelSpec,
    fleet: FleetDefaults,
    hosts: Mapping[str, Host],
    engine: str,
    launcher: str,
) -> None:
    lane = make_lane(engine=engine, launcher=launcher)
    other = model.model_copy(update={"path": "/models/Other"})
    before = render_lane(lane, model, fleet, hosts, COMMIT)
    after = render_lane(lane, other, fleet, hosts, COMMIT)
    assert all(a.spec_hash != b.spec_hash for a, b in zip(before, after, strict=True))


def test_hash_label_and_recompute_agree(make_lane: LaneFactory, render: Renderer) -> None:
    for spec in render(make_lane()):
        assert spec.label("lanes.spec") == spec.spec_hash
        assert compute_spec_hash(spec) == spec.spec_hash
        assert len(spec.spec_hash) == 16
        int(spec.spec_hash, 16)


def test_labels(make_lane: LaneFactory, render: Renderer) -> None:
    spec = render(make_lane(engine="vllm", port=8123))[1]
    assert dict(spec.labels) == {
        "lanes.managed": "true",
        "lanes.lane": "golden",
        "lanes.rank": "1",
        "lanes.spec": spec.spec_hash,
        "lanes.commit": COMMIT,
        "lanes.port": "8123",
        "lanes.engine": "vllm",
    }
    assert list(spec.labels) == sorted(spec.labels)
    assert spec.name == container_name("golden", 1) == "lanes-golden-r1"


def test_mounts_hf_cache_model_then_lane(make_lane: LaneFactory, render: Renderer) -> None:
    lane = make_lane(
        mounts=[
            {"source": "/srv/cache", "target": "/cache"},
            {"source": "/etc/x", "target": "/x", "read_only": True},
        ]
    )
    spec = render(lane)[0]
    assert [(m.source, m.target, m.read_only) for m in spec.mounts] == [
        ("/root/.cache/huggingface", "/root/.cache/huggingface", False),
        (MODEL_PATH, MODEL_PATH, True),
        ("/srv/cache", "/cache", False),
        ("/etc/x", "/x", True),
    ]
    argv = run_argv(spec)
    assert "/srv/cache:/cache" in argv
    assert "/etc/x:/x:ro" in argv


def test_fleet_hf_cache_is_mounted_at_the_engines_cache(
    make_lane: LaneFactory, model: ModelSpec, hosts: Mapping[str, Host]
) -> None:
    fleet = FleetDefaults(hf_cache="/data/hf", state_dir_on_host="/srv/lanes")
    spec = render_lane(make_lane(), model, fleet, hosts, COMMIT)[0]
    assert "/data/hf:/root/.cache/huggingface" in run_argv(spec)
    assert spec.env_map["HF_HOME"] == "/root/.cache/huggingface"
    assert spec.env_file == "/srv/lanes/env/lanes-golden-r0.env"


@pytest.mark.parametrize(("engine", "launcher"), ENGINES)
def test_secrets_are_names_only(make_lane: LaneFactory, render: Renderer, engine: str, launcher: str) -> None:
    lane = make_lane(
        engine=engine,
        launcher=launcher,
        secrets=[{"name": "hf-token", "env": "HF_TOKEN"}, {"name": "api", "env": "API_KEY"}],
    )
    for spec in render(lane):
        assert spec.secret_env == ("API_KEY", "HF_TOKEN")
        assert spec.env_file == f"/var/lib/lanes/env/{spec.name}.env"
        argv = run_argv(spec)
        assert argv[argv.index("--env-file") + 1] == spec.env_file
        for item in argv:
            assert not item.startswith(("HF_TOKEN=", "API_KEY="))
            assert "hf-token" not in item
            assert item != "api"
        assert "HF_TOKEN" not in spec.env_map


def test_no_secrets_no_env_file(make_lane: LaneFactory, render: Renderer) -> None:
    spec = render(make_lane(secrets=[]))[0]
    assert spec.env_file is None
    assert spec.secret_env == ()
    assert "--env-file" not in run_argv(spec)


def test_lane_env_overrides_renderer_defaults(make_lane: LaneFactory, render: Renderer) -> None:
    spec = render(make_lane(env={"NCCL_IB_DISABLE": "1", "NCCL_IB_HCA": "rocep1s0f0"}))[0]
    assert spec.env_map["NCCL_IB_DISABLE"] == "1"
    assert spec.env_map["NCCL_IB_HCA"] == "rocep1s0f0"
    assert list(spec.env) == sorted(spec.env)


def test_secret_and_plain_env_of_one_name_is_refused(make_lane: LaneFactory, render: Renderer) -> None:
    with pytest.raises(InputError) as info:
        render(make_lane(env={"HF_TOKEN": "oops"}))
    assert info.value.field == "secrets"
    assert "oops" not in str(info.value)


@pytest.mark.parametrize(
    ("mounts", "field"),
    [
        ([{"source": "/a:b", "target": "/a"}], "mounts[0]"),
        ([{"source": "/a", "target": "/a:rw"}], "mounts[0]"),
        ([{"source": "/a", "target": MODEL_PATH}], "mounts[0]"),
        ([{"source": "/a", "target": "/c"}, {"source": "/b", "target": "/c"}], "mounts[1]"),
    ],
)
def test_mounts_docker_cannot_express_are_refused(
    make_lane: LaneFactory, render: Renderer, mounts: list[dict[str, str]], field: str
) -> None:
    with pytest.raises(InputError) as info:
        render(make_lane(mounts=mounts))
    assert info.value.field == field


def test_image_that_looks_like_an_option_is_refused(make_lane: LaneFactory, render: Renderer) -> None:
    with pytest.raises(InputError) as info:
        render(make_lane(image="--privileged"))
    assert info.value.field == "image"


@pytest.mark.parametrize("where", ["args", "env", "served_model_name"])
def test_nul_bytes_are_refused(make_lane: LaneFactory, render: Renderer, where: str) -> None:
    value = "a\x00b"
    changes: dict[str, dict[str, object]] = {
        "args": {"args": [value]},
        "env": {"env": {"X": value}},
        "served_model_name": {"served_model_name": value},
    }
    change = changes[where]
    with pytest.raises(InputError, match="NUL"):
        render(make_lane(**change))


def test_unknown_host_is_an_input_error(
    make_lane: LaneFactory, model: ModelSpec, fleet: FleetDefaults, hosts: Mapping[str, Host]
) -> None:
    lane = make_lane(hosts=["dgx1", "dgx9"], tp=2)
    with pytest.raises(InputError) as info:
        render_lane(lane, model, fleet, hosts, COMMIT)
    assert info.value.field == "hosts"
    assert "dgx9" in str(info.value)


def test_render_rank_checks_its_context(
    make_lane: LaneFactory, model: ModelSpec, fleet: FleetDefaults, hosts: Mapping[str, Host]
) -> None:
    lane: Lane = make_lane()

    def ctx(rank: int, host: str) -> RankContext:
        return RankContext(
            lane=lane, model=model, fleet=fleet, rank=rank, host=hosts[host], commit=COMMIT,
            ports=LanePorts.of(lane), network=lane_network(lane.name, [hosts[h] for h in lane.hosts]),
        )  # fmt: skip

    assert render_rank(ctx(1, "dgx2")).name == "lanes-golden-r1"
    with pytest.raises(ValueError, match="runs on dgx2"):
        render_rank(ctx(1, "dgx3"))
    with pytest.raises(ValueError, match=r"ranks 0\.\.3"):
        render_rank(ctx(4, "dgx1"))


def test_flare_needs_every_peer_address(
    make_lane: LaneFactory, model: ModelSpec, fleet: FleetDefaults, hosts: Mapping[str, Host]
) -> None:
    lane = make_lane(engine="flare")
    ctx = RankContext(lane=lane, model=model, fleet=fleet, rank=0, host=hosts["dgx1"], commit=COMMIT,
                      ports=LanePorts.of(lane))  # fmt: skip
    with pytest.raises(ValueError, match="peer_addresses"):
        render_rank(ctx)


def test_container_flags(make_lane: LaneFactory, render: Renderer) -> None:
    spec = render(make_lane())[0]
    assert (spec.network, spec.ipc, spec.gpus, spec.shm_size) == ("host", "host", "all", None)
    argv = run_argv(spec)
    assert argv[:13] == [
        "docker",
        "run",
        "-d",
        "--name",
        "lanes-golden-r0",
        "--restart",
        "no",
        "--gpus",
        "all",
        "--network",
        "host",
        "--ipc",
        "host",
    ]
    # The container contract of a privileged fleet (the default), as eugr's and sparkrun's launchers run ranks,
    # with the ulimits the production lane's launcher sets: the privilege does not lift them.
    assert argv[13:24] == [
        "--privileged",
        "--ulimit",
        "memlock=-1:-1",
        "--ulimit",
        "stack=67108864",
        "--memory",
        "112g",
        "--memory-swap",
        "112g",
        "--oom-score-adj",
        "500",
    ]
    assert "--shm-size" not in argv  # with --ipc host the host's /dev/shm is used (podman refuses a size)
