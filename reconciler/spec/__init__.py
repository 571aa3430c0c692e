"""spec: pydantic models of the state and policy files, and loading them from a commit's blobs."""

from reconciler.spec.fleet import ContainerContract, DataPort, Fabric, FleetDefaults, Host, SSHSettings
from reconciler.spec.lane import Health, Lane, Mount, SecretRef, Track
from reconciler.spec.load import DesiredState, PolicySet, load_desired, load_policies
from reconciler.spec.model import Architecture, ModelSpec, MoE
from reconciler.spec.policyfiles import HardwareFile, KnownIssue, KnownIssuesFile, RuleConfig, RulesFile
from reconciler.spec.upstream import GitHead, GitHubReleases, OCIRepository, UpstreamsFile

__all__ = [
    "Architecture",
    "ContainerContract",
    "DataPort",
    "DesiredState",
    "Fabric",
    "FleetDefaults",
    "GitHead",
    "GitHubReleases",
    "HardwareFile",
    "Health",
    "Host",
    "KnownIssue",
    "KnownIssuesFile",
    "Lane",
    "MoE",
    "ModelSpec",
    "Mount",
    "OCIRepository",
    "PolicySet",
    "RuleConfig",
    "RulesFile",
    "SSHSettings",
    "SecretRef",
    "Track",
    "UpstreamsFile",
    "load_desired",
    "load_policies",
]
