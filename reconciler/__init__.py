"""lanes: a GitOps reconciler for LLM inference lanes on DGX Spark (GB10) fleets."""

__version__ = "0.1.0"
