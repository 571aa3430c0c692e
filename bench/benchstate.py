"""What bench scripts share about the example state they copy."""

from __future__ import annotations


def fleet_without_gateway(fleet: str) -> str:
    """The example fleet file without its `gateway:` section, which routes the example's lanes: a bench state
    holds lanes of its own (a gateway naming a lane the state lacks is refused at load)."""
    out, inside = [], False
    for line in fleet.splitlines(keepends=True):
        if line.startswith("gateway:"):
            inside = True
        elif inside and line.strip() and not line.startswith((" ", "#")):
            inside = False
        if not inside:
            out.append(line)
    return "".join(out)
