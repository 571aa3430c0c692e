"""The audit trail of a lane, read from git: who changed what, when, and what came of it.

`git log -p state/lanes/x.yaml` shows text diffs; a person auditing a lane
wants "image: A -> B, hosts: [..] -> [..]" per commit, the daemon's verdict
(the git note) and the benchmark evidence recorded while that version ran.
This walks first-parent history (the branch as it was deployed, one commit
after another, merges as one step) and diffs the parsed YAML of the lane
file and of the model file it names.

Evidence lands in separate commits after a change (`evidence/<lane>/*.json`,
committed by the daemon after benchmarking), so evidence added after a
change and before the next change of the same lane is attached to it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pygit2

from reconciler.errors import InputError, TransientError
from reconciler.source.gitread import resolve
from reconciler.source.notes import NOTES_REF, read_note
from reconciler.spec.yamlsrc import parse_yaml

YAML_SUFFIXES = (".yaml", ".yml")


class WalkStoppedError(TransientError):
    """The caller stopped the walk (its request timed out or went away): no thread outlives its reader."""


FileStatus = Literal["added", "modified", "removed"]


@dataclass(frozen=True)
class FieldChange:
    """One changed key, dotted for nesting (`env.HF_HOME`); lists are compared whole."""

    field: str
    old: Any
    new: Any
    kind: Literal["added", "removed", "changed"]

    def describe(self) -> str:
        if self.kind == "added":
            return f"{self.field}: (unset) -> {show_value(self.new)}"
        if self.kind == "removed":
            return f"{self.field}: {show_value(self.old)} -> (unset)"
        return f"{self.field}: {show_value(self.old)} -> {show_value(self.new)}"


@dataclass(frozen=True)
class FileChange:
    path: str
    status: FileStatus
    fields: tuple[FieldChange, ...] = ()
    error: str | None = None
    """Set when one side is not valid YAML: the change is listed without its fields."""


@dataclass(frozen=True)
class LaneChange:
    """One commit that changed a lane's file (or its model file)."""

    lane: str
    commit: str
    author: str
    email: str
    time: int
    offset_min: int
    subject: str
    files: tuple[FileChange, ...]
    note: str | None = None
    evidence: tuple[str, ...] = field(default_factory=tuple)

    @property
    def status(self) -> str:
        """added / modified / removed for the lane file; `model` when only its model file changed."""
        lane_file = self.lane_file
        return lane_file.status if lane_file else "model"

    @property
    def lane_file(self) -> FileChange | None:
        return next((f for f in self.files if "/lanes/" in f"/{f.path}"), None)

    @property
    def fields(self) -> tuple[FieldChange, ...]:
        return tuple(c for f in self.files for c in f.fields)


def show_value(value: Any) -> str:
    """A field value as a person reads it in a diff line: lists in brackets, no quotes."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(show_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _plain(value: Any) -> Any:
    """ruamel's safe loader gives plain types already; dates become strings for JSON output."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def _load(path: str, data: bytes) -> tuple[Any, str | None]:
    # The state loader's parser, with its size, alias and depth caps: any pushed commit is walked here, a
    # refused one too, and a 408-byte alias bomb once made a 28 MB dashboard page through this walk.
    try:
        doc = parse_yaml(path or "(lane file)", data).value
    except InputError as exc:
        return None, f"{path}: not valid YAML: {exc.message}"
    return _plain(doc), None


def diff_fields(old: Any, new: Any, prefix: str = "") -> list[FieldChange]:
    """The keys that differ between two parsed documents, nested maps dotted."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[FieldChange] = []
        for key in [*old, *(k for k in new if k not in old)]:
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in new:
                out.append(FieldChange(name, old[key], None, "removed"))
            elif key not in old:
                out.append(FieldChange(name, None, new[key], "added"))
            else:
                out += diff_fields(old[key], new[key], name)
        return out
    if old == new:
        return []
    return [FieldChange(prefix or "(document)", old, new, "changed")]


# -- trees ---------------------------------------------------------------------


def _subtree(repo: pygit2.Repository, tree: pygit2.Tree | None, path: str) -> pygit2.Tree | None:
    node: pygit2.Tree | None = tree
    for part in [p for p in path.strip("/").split("/") if p]:
        if node is None or part not in node:
            return None
        obj = repo[node[part].id]
        node = obj if isinstance(obj, pygit2.Tree) else None
    return node


def _blobs(tree: pygit2.Tree | None) -> dict[str, pygit2.Oid]:
    if tree is None:
        return {}
    return {entry.name or "": entry.id for entry in tree if entry.type_str == "blob"}


def _stem(name: str) -> str | None:
    for suffix in YAML_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return None


def _data(repo: pygit2.Repository, oid: pygit2.Oid | None) -> bytes | None:
    if oid is None:
        return None
    blob = repo[oid]
    return blob.data if isinstance(blob, pygit2.Blob) else None


def _file_change(repo: pygit2.Repository, path: str, old: pygit2.Oid | None, new: pygit2.Oid | None) -> FileChange:
    status: FileStatus = "added" if old is None else "removed" if new is None else "modified"
    old_doc: Any = None
    new_doc: Any = None
    errors = []
    old_data, new_data = _data(repo, old), _data(repo, new)
    if old_data is not None:
        old_doc, err = _load(path, old_data)
        errors += [err] if err else []
    if new_data is not None:
        new_doc, err = _load(path, new_data)
        errors += [err] if err else []
    if errors:
        return FileChange(path, status, (), "; ".join(errors))
    if status == "added":
        fields = diff_fields({}, new_doc if isinstance(new_doc, dict) else {"(document)": new_doc})
    elif status == "removed":
        fields = diff_fields(old_doc if isinstance(old_doc, dict) else {"(document)": old_doc}, {})
    else:
        fields = diff_fields(old_doc, new_doc)
    return FileChange(path, status, tuple(fields))


def _model_of(repo: pygit2.Repository, oid: pygit2.Oid | None) -> str | None:
    data = _data(repo, oid)
    if data is None:
        return None
    doc, _ = _load("", data)
    model = doc.get("model") if isinstance(doc, dict) else None
    return model if isinstance(model, str) else None


def _first_parent_walk(repo: pygit2.Repository, start: pygit2.Commit) -> Iterator[pygit2.Commit]:
    commit: pygit2.Commit | None = start
    while commit is not None:
        yield commit
        commit = commit.parents[0] if commit.parents else None


# -- the walk --------------------------------------------------------------------


def history(
    repo: pygit2.Repository,
    lanes: set[str] | None = None,
    *,
    rev: str = "HEAD",
    state_dir: str = "state",
    evidence_dir: str = "evidence",
    limit: int = 200,
    notes_ref: str = NOTES_REF,
    stop: Callable[[], bool] | None = None,
    max_commits: int | None = None,
) -> dict[str, list[LaneChange]]:
    """Per lane (all lanes when `lanes` is None), its changes newest first, at most `limit` each.

    `stop` is asked before each commit and ends the walk with WalkStoppedError when it says so (the
    dashboard's request is over); `max_commits` bounds how far back the walk goes.
    """
    lanes_dir = posixpath.join(state_dir, "lanes")
    models_dir = posixpath.join(state_dir, "models")
    out: dict[str, list[LaneChange]] = {}
    pending_evidence: dict[str, list[str]] = {}
    for walked, commit in enumerate(_first_parent_walk(repo, resolve(repo, rev))):
        if stop is not None and stop():
            raise WalkStoppedError(f"history walk stopped after {walked} commits")
        if max_commits is not None and walked >= max_commits:
            break
        parent_tree = commit.parents[0].tree if commit.parents else None
        tree = commit.tree
        per_lane: dict[str, list[FileChange]] = {}

        new_lanes_tree, old_lanes_tree = _subtree(repo, tree, lanes_dir), _subtree(repo, parent_tree, lanes_dir)
        new_lanes, old_lanes = _blobs(new_lanes_tree), _blobs(old_lanes_tree)
        if _tree_id(new_lanes_tree) != _tree_id(old_lanes_tree):
            for name in sorted(set(new_lanes) | set(old_lanes)):
                lane = _stem(name)
                if lane is None or (lanes is not None and lane not in lanes):
                    continue
                if new_lanes.get(name) != old_lanes.get(name):
                    path = posixpath.join(lanes_dir, name)
                    per_lane.setdefault(lane, []).append(
                        _file_change(repo, path, old_lanes.get(name), new_lanes.get(name))
                    )

        new_models_tree, old_models_tree = _subtree(repo, tree, models_dir), _subtree(repo, parent_tree, models_dir)
        if _tree_id(new_models_tree) != _tree_id(old_models_tree):
            new_models, old_models = _blobs(new_models_tree), _blobs(old_models_tree)
            changed_models = {
                _stem(n): n for n in set(new_models) | set(old_models) if new_models.get(n) != old_models.get(n)
            }
            for name in sorted(set(new_lanes) | set(old_lanes)):
                lane = _stem(name)
                if lane is None or (lanes is not None and lane not in lanes):
                    continue
                model = _model_of(repo, new_lanes.get(name)) or _model_of(repo, old_lanes.get(name))
                if model and model in changed_models:
                    file = changed_models[model]
                    path = posixpath.join(models_dir, file)
                    per_lane.setdefault(lane, []).append(
                        _file_change(repo, path, old_models.get(file), new_models.get(file))
                    )

        added_evidence = _added_evidence(repo, tree, parent_tree, evidence_dir, lanes)
        for lane, paths in added_evidence.items():
            pending_evidence.setdefault(lane, []).extend(paths)

        for lane, files in per_lane.items():
            changes = out.setdefault(lane, [])
            evidence = tuple(sorted(pending_evidence.pop(lane, [])))
            if len(changes) >= limit:
                continue
            changes.append(
                LaneChange(
                    lane=lane,
                    commit=str(commit.id),
                    author=commit.author.name,
                    email=commit.author.email,
                    time=commit.commit_time,
                    offset_min=commit.commit_time_offset,
                    subject=commit.message.strip().splitlines()[0] if commit.message.strip() else "",
                    files=tuple(files),
                    note=read_note(repo, str(commit.id), notes_ref),
                    evidence=evidence,
                )
            )
        if lanes is not None and lanes and all(len(out.get(lane, [])) >= limit for lane in lanes):
            break
    return out


def _tree_id(tree: pygit2.Tree | None) -> pygit2.Oid | None:
    return None if tree is None else tree.id


def _added_evidence(
    repo: pygit2.Repository,
    tree: pygit2.Tree,
    parent_tree: pygit2.Tree | None,
    evidence_dir: str,
    lanes: set[str] | None,
) -> dict[str, list[str]]:
    new_root, old_root = _subtree(repo, tree, evidence_dir), _subtree(repo, parent_tree, evidence_dir)
    if new_root is None or _tree_id(new_root) == _tree_id(old_root):
        return {}
    out: dict[str, list[str]] = {}
    for entry in new_root:
        lane = entry.name or ""
        if entry.type_str != "tree" or (lanes is not None and lane not in lanes):
            continue
        old_lane_tree = _subtree(repo, old_root, lane)
        if _tree_id(old_lane_tree) == entry.id:
            continue
        old_files = set(_walk_paths(repo, old_lane_tree, ""))
        for rel in _walk_paths(repo, _subtree(repo, new_root, lane), ""):
            if rel not in old_files:
                out.setdefault(lane, []).append(posixpath.join(evidence_dir, lane, rel))
    return out


def _walk_paths(repo: pygit2.Repository, tree: pygit2.Tree | None, prefix: str) -> Iterator[str]:
    if tree is None:
        return
    for entry in tree:
        name = posixpath.join(prefix, entry.name or "") if prefix else entry.name or ""
        obj = repo[entry.id]
        if isinstance(obj, pygit2.Tree):
            yield from _walk_paths(repo, obj, name)
        else:
            yield name


def lane_history(
    repo: pygit2.Repository,
    lane: str,
    *,
    rev: str = "HEAD",
    state_dir: str = "state",
    limit: int = 200,
    stop: Callable[[], bool] | None = None,
    max_commits: int | None = None,
) -> list[LaneChange]:
    """Every first-parent commit that changed `state/lanes/<lane>.yaml` (or its model file), newest first."""
    found = history(repo, {lane}, rev=rev, state_dir=state_dir, limit=limit, stop=stop, max_commits=max_commits)
    return found.get(lane, [])


def change_to_json(change: LaneChange) -> dict[str, Any]:
    """A LaneChange as plain JSON data (the CLI's `--json` and the daemon's /status use it)."""
    return {
        "commit": change.commit,
        "author": change.author,
        "email": change.email,
        "time": change.time,
        "subject": change.subject,
        "status": change.status,
        "files": [
            {
                "path": f.path,
                "status": f.status,
                "error": f.error,
                "fields": [{"field": c.field, "kind": c.kind, "old": c.old, "new": c.new} for c in f.fields],
            }
            for f in change.files
        ],
        "note": change.note,
        "evidence": list(change.evidence),
    }


def lane_changes_between(
    repo: pygit2.Repository, lane: str, old_rev: str, new_rev: str, *, state_dir: str = "state"
) -> tuple[FileChange, ...]:
    """The lane's file and the model file it names, diffed field by field from `old_rev` to `new_rev`.

    The same diff the history walk makes per commit (`_file_change`), between any two commits:
    `lanes plan` says with it what changed since the commit a lane's containers run.
    """
    trees = (resolve(repo, old_rev).tree, resolve(repo, new_rev).tree)
    lanes_dir, models_dir = posixpath.join(state_dir, "lanes"), posixpath.join(state_dir, "models")
    old_lanes, new_lanes = (_blobs(_subtree(repo, t, lanes_dir)) for t in trees)
    old_models, new_models = (_blobs(_subtree(repo, t, models_dir)) for t in trees)
    out: list[FileChange] = []
    models: set[str] = set()
    for name in sorted(set(old_lanes) | set(new_lanes)):
        if _stem(name) != lane:
            continue
        models |= {m for m in (_model_of(repo, old_lanes.get(name)), _model_of(repo, new_lanes.get(name))) if m}
        if old_lanes.get(name) != new_lanes.get(name):
            out.append(_file_change(repo, posixpath.join(lanes_dir, name), old_lanes.get(name), new_lanes.get(name)))
    out += [
        _file_change(repo, posixpath.join(models_dir, name), old_models.get(name), new_models.get(name))
        for name in sorted(set(old_models) | set(new_models))
        if _stem(name) in models and old_models.get(name) != new_models.get(name)
    ]
    return tuple(out)
