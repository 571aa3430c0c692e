"""observe: run the probe on every host and parse what it says."""

from reconciler.observe.probe import ProbeMemory, lease_file, observe, probe_host

__all__ = ["ProbeMemory", "lease_file", "observe", "probe_host"]
