"""Who sends which model files to whom, round by round, so the origin sends each byte about once.

Staging a model onto a lane's hosts (`reconciler/execute/staging.py`) copies
from its origin (the control node, a NAS, or a Spark that holds it) to every
rank host missing a file or holding a wrong one. Sending everything from the
origin makes its link the limit (n x the model size through it, one host
after another, as sparkrun's distribution does). Here, once a Spark holds the
whole model it is a sender too, over the hosts' own network:

- Spark hosts that can talk to each other (both on a data plane, or the fleet
  says so) form groups; within a group one copy from outside is enough.
- Each round, every Spark that holds the model feeds one receiver of its group
  that still needs it; the origin feeds one receiver of a group that has no
  copy yet (none at all once every group has one). Holders double each round.
- A group's first copy (its seed) goes to the receiver that needs the fewest
  bytes: a host missing one flipped file is made whole from the origin and
  then feeds the others, so the origin sends that one file.
- A Spark holding the whole model from the start seeds its group: the origin
  then sends nothing to it.

Within one sender -> receiver pair the file list is split into up to
`parallel` transfers (one rsync each), balanced by bytes (largest file first
onto the lightest transfer). Pure: no I/O; sizes are the manifest's.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Transfer:
    """One rsync: these files from `sender` to `receiver`."""

    sender: str
    receiver: str
    files: tuple[str, ...]
    bytes: int


@dataclass(frozen=True)
class FanoutPlan:
    rounds: tuple[tuple[Transfer, ...], ...]
    """Each round's transfers run at once; a round starts when the previous one has finished."""
    unreachable: tuple[str, ...] = ()
    """Receivers nobody can send to (no origin, and no Spark of their group holds the model)."""

    def bytes_from(self, sender: str) -> int:
        return sum(t.bytes for r in self.rounds for t in r if t.sender == sender)

    def bytes_to(self, receiver: str) -> int:
        return sum(t.bytes for r in self.rounds for t in r if t.receiver == receiver)

    def feeds(self) -> tuple[tuple[tuple[str, str], ...], ...]:
        """(sender, receiver) pairs of each round, once per pair (for reading and tests)."""
        return tuple(tuple(dict.fromkeys((t.sender, t.receiver) for t in r)) for r in self.rounds)


def split_by_bytes(files: Mapping[str, int], parallel: int) -> list[tuple[str, ...]]:
    """Files into up to `parallel` lists of about equal bytes: the largest file first onto the lightest list
    (ties: the earlier list; equal sizes: by path), each list then sorted by path; empty lists dropped."""
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, not {parallel}")
    bins: list[list[str]] = [[] for _ in range(parallel)]
    loads = [0] * parallel
    for path in sorted(files, key=lambda p: (-files[p], p)):
        lightest = loads.index(min(loads))
        bins[lightest].append(path)
        loads[lightest] += files[path]
    return [tuple(sorted(b)) for b in bins if b]


def _groups(hosts: Collection[str], pairs: Collection[frozenset[str]]) -> dict[str, int]:
    """Each host's group number: hosts joined by talking pairs, directly or through others."""
    near: dict[str, set[str]] = {h: set() for h in hosts}
    for a, b in (tuple(p) for p in pairs):
        if a in near and b in near:
            near[a].add(b)
            near[b].add(a)
    group: dict[str, int] = {}
    for number, start in enumerate(sorted(hosts)):
        if start in group:
            continue
        group[start] = number
        stack = [start]
        while stack:
            for other in near[stack.pop()] - group.keys():
                group[other] = number
                stack.append(other)
    return group


def plan_fanout(
    needs: Mapping[str, Mapping[str, int]],
    *,
    holders: Collection[str],
    origin: str | None,
    pairs: Iterable[tuple[str, str]],
    parallel: int = 1,
) -> FanoutPlan:
    """Rounds of transfers that leave every receiver holding the model.

    `needs`: receiver -> {path: size} of the files it must be sent (a receiver needing nothing holds the model);
    `holders`: Sparks that already hold every file, verified; `origin`: the sender outside the fleet's Sparks
    (the control node or an origin host), None when only Sparks hold it; `pairs`: Sparks that can reach each
    other's sshd host-to-host; `parallel`: the most transfers into one receiver at once.
    """
    if origin is not None and (origin in needs or origin in holders):
        raise ValueError(f"the origin {origin!r} is a Spark of the plan: name it among the holders instead")
    talk = {frozenset(p) for p in pairs if p[0] != p[1]}
    have = set(holders) | {r for r, files in needs.items() if not files}
    pending = sorted(r for r, files in needs.items() if files and r not in have)
    group = _groups([*have, *pending], talk)
    seeded = {group[h] for h in have}
    need_bytes = {r: sum(needs[r].values()) for r in pending}
    unreachable: list[str] = []
    rounds: list[tuple[Transfer, ...]] = []
    while pending:
        fed: dict[str, str] = {}  # receiver -> sender, this round
        for sender in sorted(have):
            for receiver in pending:
                if receiver not in fed and frozenset((sender, receiver)) in talk:
                    fed[receiver] = sender
                    break
        unseeded = sorted({group[r] for r in pending} - seeded)
        if unseeded and origin is not None:
            # The group whose seed comes first by name; its seed the receiver needing the fewest bytes.
            seeds = [min((r for r in pending if group[r] == g), key=lambda r: (need_bytes[r], r)) for g in unseeded]
            seed = min(seeds)
            fed[seed] = origin
            seeded.add(group[seed])
        elif unseeded:
            unreachable.extend(r for r in pending if group[r] in unseeded)
            seeded.update(unseeded)
        if not fed:
            break
        rounds.append(tuple(
            Transfer(fed[receiver], receiver, part, sum(needs[receiver][p] for p in part))
            for receiver in sorted(fed)
            for part in split_by_bytes(needs[receiver], parallel)
        ))  # fmt: skip
        have.update(fed)
        pending = [r for r in pending if r not in fed and r not in unreachable]
    return FanoutPlan(rounds=tuple(rounds), unreachable=tuple(sorted(unreachable)))
