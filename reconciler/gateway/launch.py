"""Start SMG with its control-plane key read from a file: `python -m reconciler.gateway.launch --key-file F -- ARGS`.

SMG 1.13.0 takes its control-plane keys only on its command line (`--control-plane-api-keys
id:name:admin:KEY`, smg/router_args.py; no file or environment variable), and a command line is readable by
every local user in /proc. This launcher reads the key from a file instead (systemd's credentials directory:
systemd/lanes-gateway.service loads it with LoadCredential=), parses the other ARGS with SMG's own parser
(`smg.launch_router.parse_router_args`, what `smg launch ARGS` does), adds the key to the parsed arguments and
starts the router in this process (`smg.launch_router.launch_router`), so the key never appears in argv.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

MAX_KEY_BYTES = 4096
KEY_ID = "lanes"
"""The key's id and name in SMG's audit log (`id:name:role:key`)."""


def read_key(path: str) -> str:
    """The key in `path`, alone on one line; refused (ValueError, naming the file) when it cannot be read, is
    empty, too long, or holds spaces or control characters. The launcher and the daemon read it alike."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_KEY_BYTES:
        raise ValueError(f"{path}: longer than {MAX_KEY_BYTES} bytes; not a key")
    try:
        key = raw.decode("utf-8", "strict").strip()
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; not a key") from None
    if not key or any(ch.isspace() or not ch.isprintable() for ch in key):
        raise ValueError(f"{path}: empty, or holds spaces or control characters; write the key alone on one line")
    return key


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m reconciler.gateway.launch", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--key-file",
        default=None,
        help="the control-plane key; default: $CREDENTIALS_DIRECTORY/gateway-key (systemd's LoadCredential=)",
    )
    parser.add_argument("smg_args", nargs=argparse.REMAINDER, help="after --: the arguments of `smg launch`")
    args = parser.parse_args(argv)
    key_file = args.key_file
    if key_file is None:
        creds = os.environ.get("CREDENTIALS_DIRECTORY")
        if not creds:
            raise SystemExit("no --key-file and no $CREDENTIALS_DIRECTORY: where is the gateway's key?")
        key_file = os.path.join(creds, "gateway-key")
    try:
        key = read_key(key_file)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    rest = list(args.smg_args)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if any(arg.startswith("--control-plane-api-keys") for arg in rest):
        raise SystemExit("give the key in --key-file, not --control-plane-api-keys (argv is readable by all)")

    from smg.launch_router import launch_router, parse_router_args

    router_args = parse_router_args(rest)
    # The parsed form of `id:name:admin:KEY` (RouterArgs._parse_control_plane_api_keys): (id, name, key, role).
    router_args.control_plane_api_keys = [(KEY_ID, KEY_ID, key, "admin")]
    launch_router(router_args)


if __name__ == "__main__":
    main(sys.argv[1:])
