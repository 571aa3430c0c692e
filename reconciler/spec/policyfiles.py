"""Policy files (`policies/*.yaml`): hardware figures, rule settings, known issues.

Every figure carries its source so a person can check it; the policy code
holds no numbers of its own.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from reconciler.spec.base import StrictModel

Severity = Literal["deny", "warn"]
ParamValue = bool | int | float | str | list[str] | dict[str, float]


class Figure(StrictModel):
    value: float
    unit: str
    source: str = Field(min_length=1, description="where the figure comes from")


class HardwareProfile(StrictModel):
    description: str = ""
    memory_total: Figure = Field(description="unified memory of the machine")
    torch_visible: Figure = Field(description="what torch.cuda reports as total: the base of the budget")
    boot_free: Figure = Field(description="free memory typically seen at engine start")
    max_boot_utilization: Figure = Field(
        description="gpu_memory_utilization above this can fail at start (boot_free / torch_visible)"
    )


class HardwareFile(StrictModel):
    profiles: dict[str, HardwareProfile]


class RuleConfig(StrictModel):
    enabled: bool = True
    severity: Severity = "deny"
    description: str = ""
    params: dict[str, ParamValue] = Field(default_factory=dict)


class RulesFile(StrictModel):
    rules: dict[str, RuleConfig]


class IssueCondition(StrictModel):
    """Lane configuration that triggers a known issue; every set field must match."""

    quantization: tuple[str, ...] = Field(default=(), description="model weight formats")
    kv_cache_dtype: tuple[str, ...] = ()
    moe: bool | None = None
    min_ep: int | None = None
    min_tp: int | None = None
    min_pp: int | None = None
    min_dcp: int | None = None
    launcher: str | None = None
    args_include: tuple[str, ...] = Field(default=(), description="engine args that must all be present")
    arg_values: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="engine flags given with one of these values ('--flag value' or '--flag=value'; case ignored)",
    )
    unless_env: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="the issue does not apply when the lane's env sets the variable to one of these values "
        "(case ignored): the switch that turns the affected behaviour off",
    )
    hardware: tuple[str, ...] = Field(
        default=(), description="hardware profiles (policies/hardware.yaml): some host of the lane uses one"
    )
    attention: tuple[Literal["mha", "gqa", "mla"], ...] = Field(default=(), description="the model's attention kind")
    sparse_attention: bool | None = Field(
        default=None, description="the model has a sparse-attention indexer (index_head_dim is set)"
    )
    attention_backend_not: tuple[str, ...] = Field(
        default=(),
        description="vLLM: the attention backend the lane names (--attention-backend, --attention-config's "
        "backend, or VLLM_ATTENTION_BACKEND) is none of these; a lane that names none runs the engine's "
        "default, which matches",
    )
    min_gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    shares_host: bool | None = Field(
        default=None, description="another running lane is placed on one of the lane's hosts"
    )


class UpstreamRef(StrictModel):
    """An upstream issue or pull request, as it was read on the public tracker."""

    repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", description="owner/name on GitHub")
    number: int = Field(ge=1)
    kind: Literal["issue", "pull"]
    title: str = Field(min_length=1)
    state: Literal["open", "closed", "merged"]
    checked: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="when the thread was read (YYYY-MM-DD)")
    note: str = Field(default="", description="what the thread showed that this entry relies on")


class KnownIssue(StrictModel):
    id: str = Field(min_length=1)
    engine: str
    versions: str = Field(description="PEP 440 specifier of affected engine versions, e.g. '<0.32.0'")
    when: IssueCondition = IssueCondition()
    severity: Severity = "deny"
    summary: str = Field(min_length=1)
    action: str = Field(min_length=1, description="what to do about it")
    ref: str = Field(min_length=1, description="upstream issue or pull request")
    upstream: tuple[UpstreamRef, ...] = Field(
        default=(), description="the upstream threads this entry was verified against, with their state"
    )
    fixed_in: str | None = Field(
        default=None,
        description="the first engine release with the fix, where one is known; none means unfixed upstream "
        "when the threads were read",
    )
    fixed_in_commit: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{40}$",
        description=(
            "the full sha of the commit that fixes the issue upstream: a build from a git head "
            "(engine_version with a +g<sha> local segment) is checked by ancestry instead of by version"
        ),
    )
    repo: str | None = Field(
        default=None,
        min_length=1,
        description="the repository the fix commit is in (owner/name on GitHub, or a git URL); needs a git-head source",
    )

    @model_validator(mode="after")
    def _fix_names_its_repo(self) -> KnownIssue:
        if self.fixed_in_commit is not None and self.repo is None:
            raise ValueError("fixed_in_commit needs repo: the repository the fix commit is in")
        return self


class KnownIssuesFile(StrictModel):
    issues: tuple[KnownIssue, ...] = ()
