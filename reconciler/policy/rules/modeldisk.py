"""`model-disk` and `model-weights`: a model's files fit where they are to be copied, and agree with its file.

model-disk: staging copies a model's manifest to every rank host of a lane before any old rank stops, so a
host whose disk cannot take the files must be refused before the first byte moves, with the figures. On
each rank host, the free bytes under the model path plus the bytes of the model already there must hold
the manifest's total plus a margin; put the other way, the bytes still to copy plus the margin must fit
in the free space. The margin is the largest of:

- `margin_gib`: a floor for everything else that writes to the same filesystem while a lane runs (on a
  Spark the model folder usually sits on the root filesystem, beside Docker's images and the engines'
  compile caches; a full root filesystem stops `docker` and the journal);
- `margin_percent` of the model's size;
- the model's largest file: without --inplace, rsync builds an updated file as a separate new copy and
  renames it over the old one only once it is complete (rsync(1) 3.2.7, --inplace), so repairing a
  mismatched shard needs room for a second copy of it.

Figures come from the probe (`reconciler.policy.diskfacts`): without host facts (a plain `lanes check`)
the rule says nothing, and a host whose probe did not report the path is left alone. A model already
whole on a host (by the probe's byte count) needs nothing copied and is not checked. Each model is
checked on its own: two models still to copy onto one filesystem each see its whole free space.

model-weights: a model file's `weight_bytes` is the safetensors index's total_size (the tensor bytes the
memory budget counts); the manifest's `.safetensors` files hold those tensors plus a small header each
(an 8-byte length and a JSON table of the tensors: huggingface/safetensors docs, "Format"). weight_bytes
above the shards' sum, or more than `tolerance_percent` below it, is a figure to fix: warned, not denied.
"""

from __future__ import annotations

from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context
from reconciler.policy.verdict import GIB

DISK_RULE = "model-disk"
WEIGHTS_RULE = "model-weights"


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def margin_bytes(rule: RuleSettings, total: int, largest: int) -> int:
    """The margin above the bytes still to copy (see the module's docstring)."""
    floor = int(rule.number("margin_gib") * GIB)
    share = int(rule.number("margin_percent") / 100 * total)
    return max(floor, share, largest)


def check_model_disk(ctx: Context, rule: RuleSettings) -> None:
    desired = ctx.desired
    for lane in sorted(desired.lanes.values(), key=lambda ln: ln.name):
        model = desired.models.get(lane.model)
        manifest = desired.manifests.get(lane.model)
        if model is None or manifest is None:
            continue
        total = manifest.total_bytes
        margin = margin_bytes(rule, total, manifest.largest())
        for host in lane.hosts:
            seen = ctx.model_disks.get((host, model.path))
            if seen is None:
                continue
            present = min(seen.present or 0, total)
            missing = total - present
            if missing == 0:
                continue
            need = missing + margin
            if seen.free >= need:
                continue
            where = seen.path if seen.measured_at == seen.path else f"{seen.path} (measured at {seen.measured_at})"
            ctx.report(
                rule,
                severity="deny",
                lane=lane,
                host=host,
                message=(
                    f"{host}: {where} has {_gib(seen.free)} free but model {model.name} needs {_gib(need)}: "
                    f"{_gib(missing)} still to copy of {_gib(total)} ({_gib(present)} already there) plus a "
                    f"{_gib(margin)} margin; free {_gib(need - seen.free)} on {host} before staging"
                ),
                detail={
                    "path": seen.path,
                    "measured_at": seen.measured_at,
                    "need_bytes": need,
                    "free_bytes": seen.free,
                    "margin_bytes": margin,
                    "missing_bytes": missing,
                    "present_bytes": present,
                    "model_bytes": total,
                },
            )


def check_model_weights(ctx: Context, rule: RuleSettings) -> None:
    desired = ctx.desired
    tolerance = rule.number("tolerance_percent") / 100
    for name in sorted(desired.manifests):
        model = desired.models.get(name)
        shards = desired.manifests[name].safetensors_bytes()
        if model is None or shards == 0:
            continue
        weights = model.weight_bytes
        if weights > shards:
            why = f"more than the {shards} bytes of its .safetensors files, which hold every tensor"
        elif shards - weights > tolerance * shards:
            why = (
                f"{(shards - weights) / shards:.1%} below the {shards} bytes of its .safetensors files "
                f"(tensors plus small headers; more than {tolerance:.0%} apart)"
            )
        else:
            continue
        ctx.report(
            rule,
            severity="warn",
            lane=None,
            message=(
                f"model {name}: weight_bytes {weights} ({_gib(weights)}) is {why}; set it to the safetensors "
                f"index's total_size (`lanes model describe` reads it)"
            ),
            detail={"model": name, "weight_bytes": weights, "safetensors_bytes": shards},
        )
