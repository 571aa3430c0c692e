"""Facts: the host protocol. What lanes sends to a host, and the pure parsers of what comes back.

Pure layer: stdlib only (and `reconciler.spec`), below `engines` and `policy`.
`labels` names the labels every lanes container carries, `container` is a
container as `docker run` receives it, `docker` builds every docker command
and parses its output, `commands` builds the other host commands (probe,
lease, env file, drop caches), `parse` reads what they print, and `observed`
holds the typed result the planner diffs against.
"""
