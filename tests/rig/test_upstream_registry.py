"""The upstream OCI poller against the rig's real distribution registry: tags, digests, an unchanged poll."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.spec.upstream import OCIRepository
from reconciler.upstream import PollSettings, UpstreamStore, poll_source
from tests.rig.machine import IMAGE_REPO, REGISTRY
from tests.rig.rig import Rig

pytestmark = [pytest.mark.rig, pytest.mark.timeout(120)]


async def test_tags_and_digests_come_from_the_real_registry(rig: Rig, tmp_path: Path) -> None:
    # Release tags only, as a real source's filter would be: the rig's registry also holds the engine image
    # the preflight test pushes to the same repository (`vllm-nightly`), which `^v` alone would take.
    source = OCIRepository(
        kind="oci", name="standin", registry=REGISTRY, repository=IMAGE_REPO, tag_filter=r"^v[0-9]+$", insecure=True
    )
    settings = PollSettings(data_dir=tmp_path / "upstream")
    with UpstreamStore(tmp_path / "lanes.db") as store:
        first = await poll_source(source, store, settings)
        assert first.status == "new", first.error
        assert set(first.new) == {"v1", "v2"}
        for tag in ("v1", "v2"):
            record = store.release("standin", tag)
            assert record is not None and record.digest == rig.registry_digest(tag)
        again = await poll_source(source, store, settings)
        assert again.status == "unchanged" and again.new == ()
