"""Reading docker command lines the way the docker CLI does, for the simulated runtime.

The reconciler's renderers emit real `docker run ...` argv lists; the sim
must accept exactly what docker accepts (`--name x` and `--name=x`,
repeated `-e`, `--label k=v`) and refuse what docker refuses (an unknown
flag is exit 125 before anything runs), or tests would pass against a
friendlier docker than the one on a Spark. Also the small Go-template subset
(`{{json .}}`, `{{.State.Status}}`) that `--format` uses. Pure functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


class CliError(Exception):
    """A docker usage or daemon error: message for stderr and the exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


# Options of `docker run` that take a value; the values are recorded, most
# have no effect on a stand-in process (there is no GPU or cgroup to apply).
def words(text: str) -> frozenset[str]:
    return frozenset(text.split())


RUN_VALUE_OPTIONS = words(
    "--name --label -l -e --env --env-file -v --volume --mount --gpus --network --net --ipc --shm-size "
    "--restart --entrypoint --ulimit --pid --user -u --workdir -w --device --cap-add --cap-drop "
    "--security-opt --runtime --log-driver --log-opt --pull --hostname -h --cpus --memory -m --tmpfs "
    "--add-host -p --publish --stop-timeout --stop-signal --platform --group-add --memory-swap --oom-score-adj"
)
RUN_FLAGS = words("-d --detach --rm --privileged --init -i --interactive -t --tty -it -dit -itd")
_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")


@dataclass
class Options:
    """Options seen before the positionals, by long name, in order."""

    values: dict[str, list[str]] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    positionals: list[str] = field(default_factory=list)

    def last(self, name: str, default: str | None = None) -> str | None:
        seen = self.values.get(name)
        return seen[-1] if seen else default

    def all(self, name: str) -> list[str]:
        return self.values.get(name, [])


RUN_ALIASES = {
    "-l": "--label",
    "-e": "--env",
    "-v": "--volume",
    "--net": "--network",
    "-u": "--user",
    "-w": "--workdir",
    "-h": "--hostname",
    "-m": "--memory",
    "-p": "--publish",
    "-d": "--detach",
    "-i": "--interactive",
    "-t": "--tty",
}


def parse_options(
    args: Sequence[str],
    value_options: frozenset[str],
    flags: frozenset[str],
    command: str,
    aliases: dict[str, str],
    *,
    stop_at_positional: bool = True,
) -> Options:
    """Split `args` like docker's flag parser; short forms are stored under their long name."""
    names = aliases
    out = Options()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.positionals += args[i + 1 :]
            break
        if not arg.startswith("-") or arg == "-":
            if stop_at_positional:
                out.positionals += args[i:]
                break
            out.positionals.append(arg)
            i += 1
            continue
        flag, eq, inline = arg.partition("=")
        if flag in value_options:
            if eq:
                value = inline
            elif i + 1 < len(args):
                i += 1
                value = args[i]
            else:
                raise CliError(f"flag needs an argument: {flag}\nSee 'docker {command} --help'.", 125)
            out.values.setdefault(names.get(flag, flag), []).append(value)
        elif arg in flags:
            for one in _expand_short(arg):
                out.flags.add(names.get(one, one))
        else:
            raise CliError(f"unknown flag: {flag}\nSee 'docker {command} --help'.", 125)
        i += 1
    return out


def _expand_short(flag: str) -> list[str]:
    if flag.startswith("--") or len(flag) == 2:
        return [flag]
    return ["-" + c for c in flag[1:]]  # -dit is -d -i -t


def check_name(name: str) -> None:
    if not _NAME.match(name):
        raise CliError(
            f"docker: Error response from daemon: Invalid container name ({name}), "
            "only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed.\nSee 'docker run --help'.",
            125,
        )


def name_conflict(name: str, holder_id: str) -> CliError:
    return CliError(
        f'docker: Error response from daemon: Conflict. The container name "/{name}" is already in use by '
        f'container "{holder_id}". You have to remove (or rename) that container to be able to reuse that '
        "name.\nSee 'docker run --help'.",
        125,
    )


def pull_denied(repo: str) -> CliError:
    return CliError(
        f"Error response from daemon: pull access denied for {repo}, repository does not exist or may "
        "require 'docker login': denied: requested access to the resource is denied",
        1,
    )


def ps_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """`docker ps` without --format: a header and one line per container."""
    columns = ("ID", "Image", "Command", "RunningFor", "Status", "Ports", "Names")
    lines = ["CONTAINER ID\tIMAGE\tCOMMAND\tCREATED\tSTATUS\tPORTS\tNAMES"]
    return lines + ["\t".join(str(r[c]) for c in columns) for r in rows]


def parse_env(pairs: Sequence[str]) -> list[str]:
    """`-e K=V` entries as docker keeps them; a bare `-e K` (copy from the CLI's env) is dropped."""
    return [p for p in pairs if "=" in p]


def parse_env_file(text: str) -> list[str]:
    """docker's --env-file format: KEY=VALUE lines, # comments, no quoting."""
    out = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        if "=" in stripped:
            out.append(stripped)
    return out


_SIZE = re.compile(r"^(\d+(?:\.\d+)*) ?([kmgtp])?i?b?$", re.IGNORECASE)


def ram_in_bytes(text: str, flag: str) -> int:
    """A size argument (`--shm-size 16g`) in bytes, binary units, as docker's go-units RAMInBytes reads it.

    `docker inspect` prints the number (HostConfig.ShmSize 17179869184), not what was typed.
    """
    match = _SIZE.match(text)
    if match is None:
        raise CliError(f'invalid argument "{text}" for "{flag}" flag: invalid size: \'{text}\'', 125)
    scale = 1024 ** " kmgtp".index((match.group(2) or " ").lower())
    return int(float(match.group(1)) * scale)


ULIMIT_NAMES = words("core cpu data fsize locks memlock msgqueue nice nofile nproc rss rtprio rttime sigpending stack")
"""What docker's go-units ParseUlimit knows (the RLIMIT_* names, lower case, without `as`)."""
CAPABILITIES = words(
    "AUDIT_CONTROL AUDIT_READ AUDIT_WRITE BLOCK_SUSPEND BPF CHECKPOINT_RESTORE CHOWN DAC_OVERRIDE "
    "DAC_READ_SEARCH FOWNER FSETID IPC_LOCK IPC_OWNER KILL LEASE LINUX_IMMUTABLE MAC_ADMIN MAC_OVERRIDE MKNOD "
    "NET_ADMIN NET_BIND_SERVICE NET_BROADCAST NET_RAW PERFMON SETFCAP SETGID SETPCAP SETUID SYSLOG SYS_ADMIN "
    "SYS_BOOT SYS_CHROOT SYS_MODULE SYS_NICE SYS_PACCT SYS_PTRACE SYS_RAWIO SYS_RESOURCE SYS_TIME "
    "SYS_TTY_CONFIG WAKE_ALARM ALL"
)
"""Linux capabilities as docker accepts them for --cap-add (with or without the CAP_ prefix)."""


def parse_ulimits(values: Sequence[str]) -> list[dict[str, Any]] | None:
    """`--ulimit name=soft[:hard]` as docker records it; no flag is null (Go's nil list)."""
    out = []
    for value in values:
        name, eq, limits = value.partition("=")
        soft, _, hard = limits.partition(":")
        if not eq or not soft.lstrip("-").isdigit() or (hard and not hard.lstrip("-").isdigit()):
            raise CliError(f'invalid argument "{value}" for "--ulimit" flag: invalid ulimit argument: {value}', 125)
        if name not in ULIMIT_NAMES:
            raise CliError(f'invalid argument "{value}" for "--ulimit" flag: invalid ulimit type: {name}', 125)
        if (hard and int(soft) > int(hard) >= 0) or (int(soft) == -1 and hard and int(hard) != -1):
            raise CliError(
                f'invalid argument "{value}" for "--ulimit" flag: ulimit soft limit must be less than or equal '
                f"to hard limit: {soft} > {hard}",
                125,
            )
        out.append({"Name": name, "Hard": int(hard or soft), "Soft": int(soft)})
    return out or None


def parse_caps(values: Sequence[str]) -> list[str] | None:
    caps = []
    for value in values:
        cap = value.upper().removeprefix("CAP_")
        if cap not in CAPABILITIES:
            raise CliError(
                f'docker: Error response from daemon: invalid CapAdd: unknown capability: "CAP_{cap}".\n'
                "See 'docker run --help'.",
                125,
            )
        caps.append(f"CAP_{cap}")
    return caps or None


def parse_oom_score_adj(value: str | None) -> int:
    if value is None:
        return 0
    if not value.lstrip("-").isdigit():
        raise CliError(f'invalid argument "{value}" for "--oom-score-adj" flag: strconv.ParseInt: parsing '
                       f'"{value}": invalid syntax', 125)  # fmt: skip
    score = int(value)
    if not -1000 <= score <= 1000:
        raise CliError(
            f"docker: Error response from daemon: Invalid value {score}, range for oom score adj is "
            "[-1000, 1000].\nSee 'docker run --help'.",
            125,
        )
    return score


def device_requests(gpus: str | None) -> list[dict[str, Any]] | None:
    """`--gpus all|N|device=0,1` as the GPU device request docker records (null without the flag)."""
    if gpus is None:
        return None
    count, ids = 0, None
    if gpus == "all":
        count = -1
    elif gpus.isdigit():
        count = int(gpus)
    elif gpus.startswith("device="):
        ids = gpus.removeprefix("device=").split(",")
    else:
        raise CliError(f"invalid argument \"{gpus}\" for \"--gpus\" flag: unexpected key '{gpus}' in '{gpus}'", 125)
    return [{"Driver": "", "Count": count, "DeviceIDs": ids, "Capabilities": [["gpu"]], "Options": {}}]


def parse_labels(pairs: Sequence[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        labels[key] = value
    return labels


def matches_filters(filters: Sequence[str], fields: dict[str, Any]) -> bool:
    """docker ps --filter: labels must all match; names, ids and statuses match any of theirs."""
    by_key: dict[str, list[str]] = {}
    for f in filters:
        key, eq, value = f.partition("=")
        if not eq:
            raise CliError(f'Error response from daemon: invalid filter "{f}"', 1)
        by_key.setdefault(key, []).append(value)
    labels: dict[str, str] = fields["labels"]
    for key, values in by_key.items():
        if key == "label":
            for wanted in values:
                k, eq, v = wanted.partition("=")
                if k not in labels or (eq and labels[k] != v):
                    return False
        elif key == "name":
            if not any(re.search(v, fields["name"]) for v in values):
                return False
        elif key == "id":
            if not any(fields["id"].startswith(v) for v in values):
                return False
        elif key == "status":
            if fields["status"] not in values:
                return False
        else:
            raise CliError(f"Error response from daemon: invalid filter '{key}'", 1)
    return True


_FIELD = re.compile(r"\{\{\s*(json\s+)?\.([A-Za-z0-9_.]*)\s*\}\}")


def render_template(template: str, obj: dict[str, Any]) -> str:
    """The `--format` subset the reconciler and people use: {{json .X}} and {{.X.Y}}."""
    text = template.removeprefix("table ").replace("\\t", "\t").replace("\\n", "\n")

    def value(match: re.Match[str]) -> str:
        current: Any = obj
        for part in [p for p in match.group(2).split(".") if p]:
            if not isinstance(current, dict) or part not in current:
                return "<no value>"
            current = current[part]
        if match.group(1):
            return json.dumps(current, separators=(",", ":"))
        if isinstance(current, bool):
            return "true" if current else "false"
        if isinstance(current, dict):
            return "map[" + " ".join(f"{k}:{v}" for k, v in sorted(current.items())) + "]"
        if isinstance(current, list):
            return "[" + " ".join(str(v) for v in current) + "]"
        return str(current)

    if "{{" in _FIELD.sub("", text):
        raise CliError(f"template: unsupported by the simulator: {template}", 1)
    return _FIELD.sub(value, text)
