"""Harnesses the tests share, one module per thing they hold.

- `example`: the repository's own example fleet as tests use it (files, states, lane and host names,
  fast readiness timeouts);
- `gitrepo`: real git repositories (commit a set of files; a state repo committed to step by step);
- `sparks`: simulated Sparks for a commit, started and stopped around a test (the `lanes demo` wiring);
- `lanesproc`: the `lanes` command and daemon as child processes (config, process handle, log);
- `storeview`: what a store's sqlite file says, read without writing to it;
- `world`: the example fleet on simulated Sparks with a state repo, driven by daemons or in-process cycles;
- `disk`: a file system that really fills up;
- `waiting`: waiting for a condition, with a timeout that names what was awaited;
- `net`: a free loopback port.
"""
