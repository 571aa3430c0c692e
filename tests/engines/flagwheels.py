"""Small wheel-like zips shaped as the engines' own: what scripts/flag_tables.py is tested on, offline.

The sources are written for these tests in the shape of the real ones (SGLang 0.5.19's
`Annotated[T, Arg(...)]` dataclass fields derived into flags; vLLM 0.32's config dataclasses with
Literal aliases derived by a get_kwargs, a `serve` subcommand, frontend arguments), small enough to
read, with the constructs the reader must follow: relative and `TYPE_CHECKING` imports, a foreign
package, a top-level `.append` to a choices list, an environment switch, a custom Action that refuses,
pydantic's `Field`, a `sys.argv` condition and a platform-dependent choice list.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

SGLANG: dict[str, str] = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/arg_groups/__init__.py": "",
    "sglang/srt/arg_groups/arg_utils.py": """
import dataclasses
from typing import Annotated, List, Literal, Optional, Union, get_args, get_origin, get_type_hints

A = Annotated


@dataclasses.dataclass(frozen=True)
class Arg:
    help: str = ""
    choices: Optional[list] = None
    aliases: Optional[List[str]] = None
    type_parser: Optional[object] = None
    nargs: Optional[str] = None
    action: Optional[object] = None
    no_cli: bool = False


def _meta(tp):
    if get_origin(tp) is Annotated:
        inner, *extra = get_args(tp)
        for item in extra:
            if isinstance(item, Arg):
                return inner, item
            if isinstance(item, str):
                return inner, Arg(help=item)
        return inner, None
    return tp, None


def _optional(tp):
    if get_origin(tp) is Union:
        rest = [a for a in get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return tp


def add_cli_args_from_dataclass(parser, cls):
    hints = get_type_hints(cls, include_extras=True)
    for field in dataclasses.fields(cls):
        raw, arg = _meta(hints[field.name])
        if arg is None or arg.no_cli:
            continue
        names = ["--" + field.name.replace("_", "-")] + (arg.aliases or [])
        kwargs = {"help": arg.help}
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            kwargs["required"] = True
        inner = _optional(raw)
        if get_origin(inner) is Literal:
            values = list(get_args(inner))
            kwargs.update(type=type(values[0]), choices=arg.choices or values)
        elif get_origin(inner) in (list, List):
            kwargs.update(type=get_args(inner)[0], nargs=arg.nargs or "+")
        elif inner is bool:
            kwargs["action"] = "store_true"
        elif arg.action is not None:
            kwargs["action"] = arg.action
        else:
            kwargs["type"] = arg.type_parser or (inner if inner in (int, float) else str)
            if arg.choices:
                kwargs["choices"] = arg.choices
        parser.add_argument(*names, **kwargs)
""",
    "sglang/srt/arg_groups/argparse_actions.py": """
import argparse


class DeprecatedAction(argparse.Action):
    def __init__(self, option_strings, dest, error_message=None, nargs=0, **kwargs):
        self.error_message = error_message
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if self.error_message is not None:
            parser.error(self.error_message)
""",
    "sglang/srt/environ.py": """
import os


class EnvBool:
    def __init__(self, name):
        self.name = name

    def get(self):
        return os.environ.get(self.name, "0") == "1"


class Envs:
    SGLANG_EXTRA_SAMPLER = EnvBool("SGLANG_EXTRA_SAMPLER")


envs = Envs()
""",
    "sglang/srt/parser/__init__.py": "",
    "sglang/srt/parser/detectors.py": """
class BaseDetector:
    pass


class DeepSeekV3Detector(BaseDetector):
    pass


class Qwen3Detector(BaseDetector):
    pass
""",
    "sglang/srt/parser/reasoning_parser.py": """
from .detectors import DeepSeekV3Detector, Qwen3Detector


class ReasoningParser:
    DetectorMap = {"deepseek-v3": DeepSeekV3Detector, "qwen3": Qwen3Detector}
""",
    "sglang/srt/server_args.py": """
from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, List, Literal, Optional

from sglang.srt.arg_groups.arg_utils import A, Arg, add_cli_args_from_dataclass
from sglang.srt.arg_groups.argparse_actions import DeprecatedAction
from sglang.srt.environ import envs
from sglang.srt.parser.reasoning_parser import ReasoningParser

if TYPE_CHECKING:
    import torch

KV_CACHE_DTYPES = ["auto", "fp8_e4m3"]
KV_CACHE_DTYPES.append("nvfp4")

# Not the engine's: a module the reader ran instead of reading would stop here.
raise RuntimeError("this module was imported or run, not read")


@dataclasses.dataclass
class ServerArgs:
    model_path: A[str, Arg(help="weights", aliases=["--model"])]
    tp_size: A[int, Arg(help="tensor parallel", aliases=["--tensor-parallel-size"])] = 1
    mem_fraction_static: A[Optional[float], "fraction of memory"] = None
    kv_cache_dtype: A[str, Arg(help="KV dtype", choices=KV_CACHE_DTYPES)] = "auto"
    dtype: A[Literal["auto", "bfloat16"], "weights dtype"] = "auto"
    trust_remote_code: A[bool, "trust"] = False
    lora_paths: A[Optional[List[str]], Arg(help="adapters", nargs="*")] = None
    device: A[Optional["torch.device"], "device"] = None
    internal_only: A[int, Arg(help="set in code", no_cli=True)] = 0
    not_a_flag: int = 0

    @staticmethod
    def add_cli_args(parser):
        add_cli_args_from_dataclass(parser, ServerArgs)
        samplers = ["pytorch"]
        if envs.SGLANG_EXTRA_SAMPLER.get():
            samplers.append("extra")
        parser.add_argument("--sampling-backend", type=str, choices=samplers)
        parser.add_argument(
            "--reasoning-parser", type=str, choices=["auto"] + list(ReasoningParser.DetectorMap.keys())
        )
        parser.add_argument("--config", type=str)
        parser.add_argument(
            "--enable-old-metrics", action=DeprecatedAction, error_message="--enable-old-metrics is gone."
        )


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return ServerArgs(**vars(parser.parse_args(argv)))
""",
}

# SGLang 0.5.20 on: namespaces of msgspec Structs (sglang/srt/arg_groups/fields/), their fields
# collected with msgspec.structs.fields and get_type_hints, ServerArgs assembled with msgspec.defstruct,
# and record_fields telling a Struct from a dataclass (msgspec is a C extension: the reader models it).
SGLANG_STRUCTS: dict[str, str] = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/arg_groups/__init__.py": "",
    "sglang/srt/arg_groups/arg_utils.py": """
from __future__ import annotations

import dataclasses
import types
from typing import Annotated, Literal, Union, get_args, get_origin, get_type_hints

import msgspec
import msgspec.structs

A = Annotated


class Arg(msgspec.Struct, frozen=True):
    help: str = ""
    choices: list | None = None
    aliases: list[str] | None = None
    cli_name: str | None = None
    no_cli: bool = False


def record_fields(cls):
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        return msgspec.structs.fields(cls)
    if dataclasses.is_dataclass(cls):
        return dataclasses.fields(cls)
    return ()


def _meta(tp):
    if get_origin(tp) is Annotated:
        inner, *extra = get_args(tp)
        for item in extra:
            if isinstance(item, Arg):
                return inner, item
            if isinstance(item, str):
                return inner, Arg(help=item)
    return tp, None


def _default(field):
    absent = (dataclasses.MISSING, msgspec.NODEFAULT)
    if field.default not in absent:
        return field.default
    if field.default_factory not in absent:
        return field.default_factory()
    return dataclasses.MISSING


def add_cli_args_from_dataclass(parser, cls):
    hints = get_type_hints(cls, include_extras=True)
    for field in record_fields(cls):
        raw, arg = _meta(hints[field.name])
        if arg is None or arg.no_cli:
            continue
        names = [arg.cli_name or "--" + field.name.replace("_", "-")] + (arg.aliases or [])
        kwargs = {"help": arg.help}
        default = _default(field)
        if get_origin(raw) in (Union, types.UnionType):
            raw = next(a for a in get_args(raw) if a is not type(None))
        if get_origin(raw) is Literal:
            kwargs.update(type=str, choices=arg.choices or list(get_args(raw)))
        elif get_origin(raw) is list:
            kwargs.update(type=get_args(raw)[0], nargs="+")
        elif raw is bool:
            kwargs["action"] = "store_true"
        else:
            kwargs["type"] = raw if raw in (int, float) else str
            if default is dataclasses.MISSING:
                kwargs["required"] = True
        parser.add_argument(*names, **kwargs)
""",
    "sglang/srt/arg_groups/fields/__init__.py": """
from typing import get_type_hints

import msgspec
import msgspec.structs


def collect_input_fields(sources):
    annotations, defaults = {}, {}
    for source in sources:
        hints = get_type_hints(source, include_extras=True)
        for field in msgspec.structs.fields(source):
            if field.name in annotations:
                raise ValueError(f"{field.name!r} is declared twice")
            annotations[field.name] = hints[field.name]
            if field.default is not msgspec.NODEFAULT:
                defaults[field.name] = field.default
            elif field.default_factory is not msgspec.NODEFAULT:
                defaults[field.name] = msgspec.field(default_factory=field.default_factory)
    return annotations, defaults
""",
    "sglang/srt/arg_groups/fields/model.py": """
from __future__ import annotations

from typing import ClassVar, Literal

import msgspec

from sglang.srt.arg_groups.arg_utils import A, Arg


class Base(msgspec.Struct):
    trust_remote_code: A[bool, "trust"] = False


class Model(Base):
    _NS_PATH = "model"
    KNOWN: ClassVar[int] = 1
    model_path: A[str, Arg(help="weights", aliases=["--model"])]
    dtype: A[Literal["auto", "bfloat16"], "weights dtype"] = "auto"
    internal_only: A[int, Arg(help="set in code", no_cli=True)] = 0
""",
    "sglang/srt/arg_groups/fields/exec_.py": """
from __future__ import annotations

import msgspec

from sglang.srt.arg_groups.arg_utils import A, Arg


class ExecGraph(msgspec.Struct):
    cuda_graph_max_bs_decode: A[int | None, "decode graphs up to"] = None
    cuda_graph_max_bs_prefill: A[int | None, "prefill graphs up to"] = None
    cuda_graph_bs_decode: A[list[int] | None, Arg(help="sizes")] = msgspec.field(default_factory=list)
    not_a_flag: int = 0
""",
    "sglang/srt/server_args.py": """
from __future__ import annotations

import argparse

import msgspec

from sglang.srt.arg_groups.arg_utils import add_cli_args_from_dataclass
from sglang.srt.arg_groups.fields import collect_input_fields
from sglang.srt.arg_groups.fields.exec_ import ExecGraph
from sglang.srt.arg_groups.fields.model import Model

# Not the engine's: a module the reader ran instead of reading would stop here.
raise RuntimeError("this module was imported or run, not read")


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        add_cli_args_from_dataclass(parser, ServerArgs)
        parser.add_argument("--config", type=str)


_annotations, _defaults = collect_input_fields([Model, ExecGraph])
ServerArgs.__annotations__ = {**_annotations, **ServerArgs.__annotations__}
ServerArgs = msgspec.defstruct(
    "ServerArgs",
    [(n, a, _defaults[n]) if n in _defaults else (n, a) for n, a in ServerArgs.__annotations__.items()],
    namespace={k: v for k, v in vars(ServerArgs).items() if k not in ("__dict__", "__weakref__", "__annotations__")},
    dict=True,
)


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(argv)
""",
}

VLLM: dict[str, str] = {
    "vllm/__init__.py": "",
    "vllm/platforms/__init__.py": "from vllm.platforms.interface import detect\ncurrent_platform = detect()\n",
    "vllm/platforms/interface.py": "import torch\n\n\ndef detect():\n    return torch.device('cuda')\n",
    "vllm/config/__init__.py": "from vllm.config.cache import CacheConfig\n",
    "vllm/config/utils.py": """
from pydantic.dataclasses import dataclass


def config(cls):
    return dataclass(cls)
""",
    "vllm/config/cache.py": """
from typing import Literal

from pydantic import Field

from vllm.config.utils import config

CacheDType = Literal["fp8_ds_mla", "auto", "fp8"]


@config
class CacheConfig:
    block_size: int = Field(default=None, gt=0)
    gpu_memory_utilization: float = 0.9
    cache_dtype: CacheDType = "auto"
    enable_prefix_caching: bool | None = None
    swap_space: int | None = None
""",
    "vllm/engine/__init__.py": "",
    "vllm/engine/arg_utils.py": """
import argparse
import sys
from dataclasses import MISSING, dataclass, fields
from typing import Literal, Union, get_args, get_origin

from vllm.config import CacheConfig
from vllm.platforms import current_platform


def optional_type(return_type):
    def _optional_type(val):
        if val == "" or val == "None":
            return None
        return return_type(val)

    return _optional_type


def hints_of(tp):
    if get_origin(tp) is Union or type(tp).__name__ == "UnionType":
        out = set()
        for arg in get_args(tp):
            out |= hints_of(arg)
        return out
    return {tp}


def get_kwargs(cls):
    kwargs = {}
    for field in fields(cls):
        hints = hints_of(field.type)
        kw = {}
        literal = next((h for h in hints if get_origin(h) is Literal), None)
        if bool in hints:
            kw["action"] = argparse.BooleanOptionalAction
        elif literal is not None:
            kw.update(type=str, choices=sorted(get_args(literal)))
        elif int in hints:
            kw["type"] = int
        elif float in hints:
            kw["type"] = float
        else:
            kw["type"] = str
        if type(None) in hints and bool not in hints:
            kw["type"] = optional_type(kw["type"])
        kwargs[field.name] = kw
    return kwargs


@dataclass
class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        cache_kwargs = get_kwargs(CacheConfig)
        group = parser.add_argument_group(title="CacheConfig")
        if not ("serve" in sys.argv[1:] and "--help" in sys.argv[1:]):
            group.add_argument("--model", type=str)
        group.add_argument("--block-size", **cache_kwargs["block_size"])
        group.add_argument("--gpu-memory-utilization", **cache_kwargs["gpu_memory_utilization"])
        group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
        group.add_argument("--enable-prefix-caching", **{**cache_kwargs["enable_prefix_caching"], "default": None})
        group.add_argument("--swap-space", **cache_kwargs["swap_space"])
        group.add_argument(
            "--device", choices=["auto"] + ([current_platform.device_type] if current_platform.device_type else [])
        )
        return parser


@dataclass
class AsyncEngineArgs(EngineArgs):
    @staticmethod
    def add_cli_args(parser):
        parser = EngineArgs.add_cli_args(parser)
        parser.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction, default=False)
        return parser
""",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/launchers/__init__.py": "",
    "vllm/entrypoints/launchers/cli_args.py": """
from vllm.config.utils import config
from vllm.engine.arg_utils import AsyncEngineArgs, get_kwargs


@config
class FrontendArgs:
    host: str | None = None
    port: int = 8000

    @classmethod
    def add_cli_args(cls, parser):
        for key, value in get_kwargs(cls).items():
            parser.add_argument(f"--{key.replace('_', '-')}", **value)
        return parser


def make_arg_parser(parser):
    parser.add_argument("model_tag", type=str, nargs="?")
    parser.add_argument("--headless", action="store_true", default=False)
    parser = FrontendArgs.add_cli_args(parser)
    parser = AsyncEngineArgs.add_cli_args(parser)
    return parser
""",
    "vllm/entrypoints/cli/__init__.py": "",
    "vllm/entrypoints/cli/types.py": "class CLISubcommand:\n    name: str\n",
    "vllm/entrypoints/cli/serve.py": """
from vllm.entrypoints.cli.types import CLISubcommand
from vllm.entrypoints.launchers.cli_args import make_arg_parser


class ServeSubcommand(CLISubcommand):
    name = "serve"

    def subparser_init(self, subparsers):
        serve_parser = subparsers.add_parser(self.name, usage="vllm serve [model_tag] [options]")
        return make_arg_parser(serve_parser)


def cmd_init():
    return [ServeSubcommand()]
""",
    "vllm/entrypoints/cli/main.py": """
def main():
    import vllm.entrypoints.cli.serve

    CMD_MODULES = [vllm.entrypoints.cli.serve]
    for module in CMD_MODULES:
        module.cmd_init()
""",
}


def write_wheel(path: Path, files: dict[str, str]) -> Path:
    """A zip holding these files, as a wheel holds its modules."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text.lstrip("\n"))
        zf.writestr(path.name.split("-")[0] + "-0.0.0.dist-info/METADATA", "Name: fake\n")
    return path
