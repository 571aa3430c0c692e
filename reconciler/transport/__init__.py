"""How lanes reaches hosts: run an argv on a host and get a result back.

`SSHTransport` for the fleet, `LocalTransport` for one host and tests; both
satisfy `Transport` and raise the same errors.
"""

from reconciler.transport.base import CommandResult, HostTarget, Transport
from reconciler.transport.local import LocalTransport
from reconciler.transport.ssh import SSHTransport

__all__ = ["CommandResult", "HostTarget", "LocalTransport", "SSHTransport", "Transport"]
