"""Declaring a test token the way the daemon's settings do: a file, and the hosts it may go to."""

from __future__ import annotations

from reconciler.upstream.base import PollSettings, UpstreamCredential


def with_token(settings: PollSettings, name: str, value: str, hosts: tuple[str, ...] = ("127.0.0.1",)) -> PollSettings:
    """`settings` with `name` declared for `hosts`; plain http allowed to loopback (the local test servers)."""
    assert settings.credentials_dir is not None
    path = settings.credentials_dir / name
    path.write_text(value + "\n")
    declared = UpstreamCredential(name=name, file=path, hosts=hosts)
    return settings.model_copy(
        update={"credentials": (*settings.credentials, declared), "allow_insecure_hosts": ("127.0.0.1",)}
    )
