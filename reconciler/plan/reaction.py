"""A commit's reaction: which lanes a new commit changes, and which hosts to probe before acting on them.

A push that changes one lane should not wait for a probe of the whole fleet (about 2 s at 1,000 hosts,
bench/README.md issue 27): the daemon probes the hosts of the lanes the commit changes, plans and acts on
those lanes alone with the rest of the fleet's facts from the last probe (within a bounded age), and then
runs the full cycle, which probes every host and decides the commit for every lane.

What a lane's plan reads of the commit is its own lane file, its model (and manifest) and its hosts'
definitions; the fleet file and the policies are read by every lane, so a change there is a change to
every lane (None: no reaction of its own, the full cycle at once).
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.facts.observed import ObservedFleet
from reconciler.spec.load import DesiredState, PolicySet

REACTION_SHARE = 0.5
"""Past this share of the fleet's hosts, probing the changed lanes' hosts first saves too little to be worth a
cycle of its own: the full cycle runs at once."""


def changed_lanes(
    old: DesiredState, old_policies: PolicySet, new: DesiredState, new_policies: PolicySet
) -> frozenset[str] | None:
    """Lanes whose desired state differs between two commits (added and removed ones included), or None when
    something every lane reads changed (the fleet file, the policies)."""
    if old.fleet != new.fleet or old_policies != new_policies:
        return None
    return frozenset(name for name in set(old.lanes) | set(new.lanes) if _lane_changed(name, old, new))


def _lane_changed(name: str, old: DesiredState, new: DesiredState) -> bool:
    was, now = old.lanes.get(name), new.lanes.get(name)
    if was is None or now is None or was != now:
        return True
    model = now.model
    if old.models.get(model) != new.models.get(model) or old.manifests.get(model) != new.manifests.get(model):
        return True
    return any(old.hosts.get(h) != new.hosts.get(h) for h in now.hosts)


def reaction_hosts(
    lanes: Iterable[str], old: DesiredState, new: DesiredState, last_seen: ObservedFleet
) -> frozenset[str]:
    """Every host a plan of `lanes` reads or acts on: their hosts in either commit, and wherever the last probe
    saw one of their containers (a rank left on a host the lane no longer names is stopped from there)."""
    hosts: set[str] = set()
    for name in lanes:
        for desired in (old, new):
            lane = desired.lanes.get(name)
            if lane is not None:
                hosts.update(lane.hosts)
        hosts.update(host for host, _ in last_seen.containers_of_lane(name))
    return frozenset(h for h in hosts if h in new.hosts)


def worth_a_reaction(hosts: frozenset[str], new: DesiredState) -> bool:
    """Whether probing `hosts` first is worth a cycle before the full one."""
    return bool(hosts) and len(hosts) <= REACTION_SHARE * len(new.hosts)


def hosts_first(
    lanes: frozenset[str], old: DesiredState, new: DesiredState, last_seen: ObservedFleet
) -> frozenset[str] | None:
    """The hosts a cycle of `lanes` alone probes (the others' recent facts reused), or None: all of them."""
    hosts = reaction_hosts(lanes, old, new, last_seen)
    return hosts if worth_a_reaction(hosts, new) else None


def reaction(
    old: DesiredState, old_policies: PolicySet, new: DesiredState, new_policies: PolicySet, last_seen: ObservedFleet
) -> tuple[frozenset[str], frozenset[str]] | None:
    """A new commit's reaction: the lanes it changes and the hosts to probe first, or None (the full cycle)."""
    lanes = changed_lanes(old, old_policies, new, new_policies)
    hosts = None if lanes is None else hosts_first(lanes, old, new, last_seen)
    return None if lanes is None or hosts is None else (lanes, hosts)
