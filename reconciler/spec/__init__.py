"""spec: pydantic models of the state and policy files, and loading them from a commit's blobs."""

from reconciler.spec.fleet import ContainerContract, DataPort, Fabric, FleetDefaults, Host, OriginHost, SSHSettings
from reconciler.spec.lane import Health, Lane, Mount, SecretRef, Track
from reconciler.spec.load import DesiredState, PolicySet, load_desired, load_policies
from reconciler.spec.manifest import Manifest, ManifestFile
from reconciler.spec.model import Architecture, ModelSpec, MoE
from reconciler.spec.origin import Origin
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
    "Manifest",
    "ManifestFile",
    "MoE",
    "ModelSpec",
    "Mount",
    "OCIRepository",
    "Origin",
    "OriginHost",
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
