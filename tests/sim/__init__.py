"""Tests of reconciler.sim: the engine stand-in, the docker-like runtime and the SSH fleet."""
