"""What a lane's image must contain to launch its ranks, checked on each host right after the pull.

A vLLM image without Ray would otherwise fail late: the old ranks already
stopped, the head's `ray start` exiting 127 in the readiness gate. The check
itself is `facts/imagecheck.py`. A generic lane's command is its own
business: nothing is checked.
"""

from __future__ import annotations

from reconciler.spec import Lane


def launcher_needs(lane: Lane) -> tuple[str, ...]:
    """What the lane's ranks run, by the entrypoints its renderer uses (`engines/<engine>.py`)."""
    if lane.engine == "vllm":
        if lane.launcher == "ray" and lane.ranks > 1:
            # The head runs `ray start` and checks the joined nodes through the ray module; workers run `ray`.
            return ("vllm", "ray", "py:ray")
        return ("vllm",)
    if lane.engine == "sglang":
        return ("python3", "py:sglang")  # `python3 -m sglang.launch_server`
    if lane.engine == "flare":
        return ("flare",)
    return ()


def describe_missing(names: list[str]) -> str:
    def one(name: str) -> str:
        return f"python module {name[3:]}" if name.startswith("py:") else f"`{name}`"

    hint = " (NVIDIA's vLLM image needs Ray installed for a Ray lane)" if any("ray" in n for n in names) else ""
    return "the image has no " + ", ".join(one(n) for n in names) + hint
