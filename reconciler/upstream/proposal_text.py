"""The words of a proposal: commit message with trailers, pull request title and body (pure).

The commit message is the audit trail (`git log` is how the team reads
history), so it names the release, links its notes and ends with trailers a
program can read back (`Lane:`, `Upstream:`, `Image:`): that is how a second
proposer recognises the same proposal. The pull request body says the same
for a reviewer, plus the policy verdict of the proposed commit: a proposal
that `lanes check` would deny is still opened, but it says so at the top.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ProposalDraft:
    lane: str
    engine: str
    lane_file: str
    source: str
    """Name of the upstream source in upstreams.yaml."""
    project: str | None
    """owner/name on GitHub for release sources, or the registry repository."""
    tag: str
    version: str
    published: str | None
    notes_url: str | None
    old_version: str
    new_version: str
    old_image: str
    new_image: str
    branch: str
    base: str
    commit: str = ""
    denial: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    trial: str = ""
    """Markdown from the trial on spare hosts: candidate vs production, per metric."""


def commit_message(f: ProposalDraft) -> str:
    where = f" of {f.project}" if f.project else ""
    when = f", published {f.published[:10]}" if f.published else ""
    notes = f"Release notes: {f.notes_url}" if f.notes_url else "The release has no notes URL recorded."
    return (
        f"{f.lane}: {f.engine} {f.version} ({f.tag})\n"
        "\n"
        f"Upstream release {f.tag}{where}{when}, from source {f.source}.\n"
        f"{notes}\n"
        "\n"
        f"engine_version: {f.old_version} -> {f.new_version}\n"
        f"image: {f.old_image} -> {f.new_image}\n"
        "\n"
        f"Lane: {f.lane}\n"
        f"Upstream: {f.source} {f.tag}\n"
        f"Image: {f.new_image}\n"
    )


def pull_title(f: ProposalDraft) -> str:
    prefix = "[denied] " if f.denial else ""
    return f"{prefix}{f.lane}: {f.engine} {f.version} ({f.tag})"


def pull_body(f: ProposalDraft) -> str:
    lines: list[str] = []
    if f.denial:
        lines += [
            f"> **Denied by policy** at `{f.commit[:12]}`: `lanes check` would refuse this commit. "
            "It is opened so the gap is visible; fix the lane or the policy before merging.",
            ">",
            *(f"> - {d}" for d in f.denial),
            "",
        ]
    where = f" of `{f.project}`" if f.project else ""
    when = f" (published {f.published[:10]})" if f.published else ""
    lines.append(f"Upstream release **{f.tag}**{where}{when} qualifies for lane `{f.lane}`'s track.")
    if f.notes_url:
        lines.append(f"Release notes: {f.notes_url}")
    lines += [
        "",
        f"| `{f.lane_file}` | before | after |",
        "|---|---|---|",
        f"| engine_version | `{f.old_version}` | `{f.new_version}` |",
        f"| image | `{f.old_image}` | `{f.new_image}` |",
        "",
    ]
    if not f.denial:
        lines.append(f"Policy: `lanes check` passes at `{f.commit[:12]}`.")
    if f.warnings:
        lines.append("")
        lines.append("Warnings:")
        lines += [f"- {w}" for w in f.warnings]
    if f.trial:
        lines += ["", f.trial.rstrip()]
    lines += ["", f"Opened by lanes from branch `{f.branch}` onto `{f.base}`."]
    return "\n".join(lines) + "\n"
