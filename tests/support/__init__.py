"""Harnesses the tests share, one module per thing they hold.

- `example`: the repository's own example fleet as tests use it (files, states, lane and host names,
  fast readiness timeouts);
- `gitrepo`: real git repositories (commit a set of files; a state repo committed to step by step).
"""
