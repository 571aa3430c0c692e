"""The base every state and policy model shares: strict, frozen, documented.

Unknown fields are errors (a typo in a lane file must not be silently
ignored), and models are frozen so the pure core can hash and share them.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
"""Names of hosts, lanes and models: they become container names and labels."""

NAME_RE = re.compile(NAME_PATTERN)

Name = Annotated[str, Field(pattern=NAME_PATTERN, description="lower-case letters, digits, '.', '_', '-'")]


def _plain_absolute(value: str) -> str:
    """An absolute host or container path with no '.' or '..' segment.

    `/models/../etc` names /etc; a reviewer reading the lane diff would not
    see that, so such a path is refused rather than normalised.
    """
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path (it must start with '/')")
    if any(part in {".", ".."} for part in value.split("/")):
        raise ValueError(f"{value!r} has a '.' or '..' segment; write the plain path it means")
    return value


AbsPath = Annotated[str, AfterValidator(_plain_absolute), Field(description="absolute path, no '.'/'..' segments")]


class StrictModel(BaseModel):
    """A frozen model that rejects unknown fields."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


_HOST_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def host_address_problem(value: str) -> str | None:
    """Why `value` is not a host name (RFC 1123 labels) or an IP address, or None.

    The address lands in ssh's and rsync's argv: an address like `-oProxyCommand=...` would be an
    option to them, and a space, `@` or `:` would change what the destination means.
    """
    import ipaddress

    try:
        ipaddress.ip_address(value)
    except ValueError:
        pass
    else:
        return None
    labels = value.removesuffix(".").split(".")
    if len(value) > 253 or not all(_HOST_LABEL.match(label) for label in labels):
        return "is not a host name (letters, digits and '-' in dot-separated labels) or an IP address"
    return None


def _host_address(value: str) -> str:
    problem = host_address_problem(value)
    if problem is not None:
        raise ValueError(f"{value[:80]!r} {problem}")
    return value


HostAddress = Annotated[
    str, AfterValidator(_host_address), Field(min_length=1, description="a host name or an IP address")
]
