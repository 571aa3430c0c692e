"""bench/corpus.py: every public recipe of bench/corpus/ is loaded, judged by lanes, and counted.

These check the corpus and its script, not lanes' accuracy: whether lanes meets issue
25's goal is what the script reports (bench/README.md), and no test here asserts it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from reconciler.errors import InputError
from reconciler.spec.load import load_desired

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import corpus  # bench/corpus.py: bench/ is not a package, hence the path above
import corpus_entry

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def judged() -> list[corpus.Judgement]:
    return corpus.judge_all(corpus_entry.load_corpus())


def test_every_entry_loads_and_is_judged(judged: list[corpus.Judgement]) -> None:
    files = sorted(p.stem for p in corpus_entry.CORPUS.glob("*.yaml"))
    assert len(files) >= 8
    assert [j.entry.name for j in judged] == files
    for j in judged:
        assert j.verdict in ("pass", "warn", "deny")
        assert j.memory in ("pass", "warn", "deny")
        # Every entry's lane got per-rank figures: the memory rule judged it, not only the others.
        assert j.need_gib is not None and j.budget_gib is not None and j.need_gib > 0
        assert all(rule in {f.split(" ", 2)[1].rstrip(":") for f in j.findings} for rule in j.rules)


def test_each_entry_becomes_a_state_repo_of_one_lane_on_its_own_sparks() -> None:
    for entry in corpus_entry.load_corpus():
        desired = load_desired(corpus.state_files(entry), "test")
        assert list(desired.lanes) == [entry.name]
        lane = desired.lanes[entry.name]
        assert len(lane.hosts) == entry.sparks == lane.tp * lane.pp
        assert lane.gpu_memory_utilization == entry.serving.gpu_memory_utilization
        assert lane.max_model_len == entry.serving.max_model_len
        assert set(lane.hosts) <= set(desired.hosts)
        assert desired.fleet.gateway is None  # the example's endpoints name lanes these repos do not have


def test_the_counts_add_up(judged: list[corpus.Judgement]) -> None:
    c = corpus.counts(judged)
    assert c["entries"] == len(judged) == c["ran"] + c["did_not_start"]
    ran = {j.entry.name for j in judged if j.entry.outcome == "ran"}
    failed = {j.entry.name for j in judged if j.entry.outcome != "ran"}
    assert set(c["denied_that_ran"]) <= ran
    assert set(c["passed_that_did_not_start"]) <= set(c["passed_on_memory_that_did_not_start"]) <= failed
    assert set(c["denied_on_memory_that_did_not_start"]) <= failed
    pooled = [j for j in judged if j.measured is not None and j.predicted is not None]
    assert c["with_measured_pool"] == len(pooled)
    assert c["pools_within_10pct"] + len(c["pools_outside_10pct"]) == len(pooled)
    for j in pooled:
        assert j.error == pytest.approx((j.predicted - j.measured) / j.measured)  # type: ignore[operator]
        assert (j.entry.name in c["pools_outside_10pct"]) == (abs(j.error or 0) > corpus.TOLERANCE)
    text = corpus.render(judged, markdown=True)
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == len(judged) + 1  # the header and one row per entry


def test_sglangs_dsv4_pool_is_lanes_own_token_count(judged: list[corpus.Judgement]) -> None:
    # The three production boots share one lane form: lanes predicts one pool for all of them, SGLang's
    # token count (reconciler/policy/sglangdsv4.py), which the script reports as it is.
    boots = [j for j in judged if j.entry.name.startswith("deepseek-v4.1-flash-sglang-4x-")]
    assert len(boots) == 3
    assert len({j.predicted for j in boots}) == 1
    assert len({j.measured for j in boots}) == 3


def test_an_entrys_published_free_memory_is_its_hosts_observation(judged: list[corpus.Judgement]) -> None:
    # GLM-5.2 W4A16 fixes its KV with --kv-cache-memory-bytes, so its budget is the free memory at boot:
    # the 117.0 GiB MemAvailable its recipe read, as lanes takes a probed host's, not the profile's figure.
    by_name = {j.entry.name: j for j in judged}
    for name in ("glm-5.2-w4a16-4x-dcp1-320k", "glm-5.2-w4a16-4x-dcp4-1m"):
        entry = by_name[name].entry
        assert entry.free_at_boot is not None
        assert by_name[name].budget_gib == pytest.approx(entry.free_at_boot.bytes / 2**30)
        assert any("free at boot (the recipe's reading" in f for f in by_name[name].findings)
    seen = corpus.host_memory(by_name["glm-5.2-w4a16-4x-dcp4-1m"].entry)
    assert seen is not None and sorted(seen) == ["dgx1", "dgx2", "dgx3", "dgx4"]
    # An entry that publishes none is judged on the profile, as lanes judges a host no probe has seen.
    assert corpus.host_memory(by_name["gpt-oss-120b-1x-mxfp4"].entry) is None


def _copy(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    source = corpus_entry.CORPUS / f"{name}.yaml"
    shutil.copy(source, folder / source.name)
    return folder / source.name


def test_an_entry_missing_a_field_is_refused_naming_the_file_and_the_field(tmp_path: Path) -> None:
    path = _copy(tmp_path, "gpt-oss-120b-1x-mxfp4")
    path.write_text(path.read_text().replace("outcome: ran\n", ""))
    with pytest.raises(InputError) as caught:
        corpus_entry.load_corpus(path.parent)
    assert caught.value.file == path.name
    assert caught.value.field == "outcome"


def test_a_wrong_value_deep_in_an_entry_is_refused_naming_its_path(tmp_path: Path) -> None:
    path = _copy(tmp_path, "minimax-m2.7-awq-2x-vllm029-gmu085")
    path.write_text(path.read_text().replace("  tokens: 240816", "  tokens: lots"))
    with pytest.raises(InputError) as caught:
        corpus_entry.load_entry(path)
    assert (caught.value.file, caught.value.field) == (path.name, "measured_pool.tokens")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("config: gpt-oss-120b", "config: no-such-model"), "model.config"),
        (("sparks: 1", "sparks: 2"), "(top level)"),
        (("outcome: ran", "outcome: worked"), "outcome"),
        (("reason: booted", "reasn: booted"), "reasn"),
    ],
)
def test_an_entry_that_does_not_hold_together_is_refused(tmp_path: Path, change: tuple[str, str], field: str) -> None:
    path = _copy(tmp_path, "gpt-oss-120b-1x-mxfp4")
    text = path.read_text()
    assert change[0] in text
    path.write_text(text.replace(change[0], change[1], 1))
    with pytest.raises(InputError) as caught:
        corpus_entry.load_entry(path)
    assert (caught.value.file, caught.value.field) == (path.name, field)


def test_a_measured_pool_needs_a_recipe_that_ran(tmp_path: Path) -> None:
    path = _copy(tmp_path, "minimax-m2.7-awq-2x-vllm029-gmu085")
    path.write_text(path.read_text().replace("outcome: ran", "outcome: oom"))
    with pytest.raises(InputError, match="measured pool belongs to a recipe that ran"):
        corpus_entry.load_entry(path)
