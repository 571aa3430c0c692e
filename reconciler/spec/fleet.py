"""Fleet-wide defaults (`state/fleet.yaml`) and hosts (`state/hosts/<host>.yaml`).

Defaults live in one place so a host file only says what is special about
that host; the effective SSH settings are resolved here, once.
"""

from __future__ import annotations

from pydantic import Field

from reconciler.spec.base import AbsPath, Name, StrictModel


class SSHSettings(StrictModel):
    """How to reach a host over SSH. Unset fields fall back to the fleet's."""

    user: str | None = Field(default=None, description="login user")
    port: int | None = Field(default=None, ge=1, le=65535, description="sshd port")


class FleetDefaults(StrictModel):
    """Settings every host and lane inherits unless it says otherwise."""

    ssh_user: str = Field(default="root", description="default SSH login user")
    ssh_port: int = Field(default=22, ge=1, le=65535)
    network_interface: str = Field(
        default="enp1s0f0np0",
        description="interface NCCL/GLOO bind to (the ConnectX-7 port that cables Sparks together)",
    )
    hf_cache: AbsPath = Field(
        default="/root/.cache/huggingface", description="HF cache on every host, mounted into engines"
    )
    state_dir_on_host: AbsPath = Field(
        default="/var/lib/lanes", description="where lanes keeps leases and env files on hosts"
    )
    registry_mirrors: tuple[str, ...] = Field(default=(), description="registry hosts to pull through, in order")
    lease_ttl_s: int = Field(default=900, ge=30, description="a host lease expires after this unless renewed")


class Host(StrictModel):
    """One Spark."""

    name: Name
    address: str = Field(min_length=1, description="IP or DNS name the control node reaches over SSH")
    ssh: SSHSettings = SSHSettings()
    hardware: str = Field(default="gb10", description="a profile name in policies/hardware.yaml")
    network_interface: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)

    def ssh_user(self, fleet: FleetDefaults) -> str:
        return self.ssh.user or fleet.ssh_user

    def ssh_port(self, fleet: FleetDefaults) -> int:
        return self.ssh.port or fleet.ssh_port

    def interface(self, fleet: FleetDefaults) -> str:
        return self.network_interface or fleet.network_interface
