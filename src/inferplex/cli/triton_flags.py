"""``tritonserver``'s flags, accepted by ``inferplex serve`` so a Triton start script runs
unchanged.

Most of Triton's flags people write are inferplex's own already, with the same names and
meanings (``--model-repository=DIR``, ``--http-port``, ``--grpc-port``, ``--metrics-port``,
``--model-control-mode``, ``--load-model``, ``--repository-poll-secs``): click reads
``--flag=value`` and ``--flag value`` alike. The others are below: each either sets a
ServerConfig field or is accepted and has no effect, with the reason logged at start and
shown in ``--help``. A boolean takes Triton's spellings (``=true``, ``=false``, ``=1``,
``=off``, ...) or no value (true). Where one of inferplex's own flags sets the same field,
inferplex's flag wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

_TRUE = ("true", "on", "1", "yes")
_FALSE = ("false", "off", "0", "no")


@dataclass(frozen=True)
class TritonFlag:
    """One tritonserver flag: what it takes, the ServerConfig fields its value sets (None: no
    effect), and one line for ``--help`` (and, for a flag without effect, the log)."""

    name: str
    takes: Literal["bool", "switch", "int", "text", "repeated"]
    sets: Callable[[Any], dict[str, Any]] | None
    why: str
    #: Triton has this setting per flag where inferplex has one: two such flags giving it
    #: different values are an error (for the others the later flag in FLAGS wins, as
    #: --disable-auto-complete-config over --strict-model-config=false)
    one_of_several: bool = False

    @property
    def param(self) -> str:
        return "triton_" + self.name.removeprefix("--").replace("-", "_")


FLAGS = (
    TritonFlag(
        "--model-store",
        "text",
        lambda path: {"model_repository": path},
        "Triton's older name of --model-repository",
    ),
    TritonFlag(
        "--strict-model-config",
        "bool",
        lambda strict: {"auto_complete_config": not strict},
        "true: every model needs a config file declaring its inputs and outputs (sets "
        "auto_complete_config off); false: configs are completed from the model, the default",
    ),
    TritonFlag(
        "--disable-auto-complete-config",
        "switch",
        lambda _: {"auto_complete_config": False},
        "configs are not completed from the model (ONNX signature, a Python model's "
        "auto_complete_config): every model needs a config file that declares them",
    ),
    TritonFlag(
        "--log-verbose",
        "int",
        lambda level: {"log_level": "debug"} if level > 0 else {},
        "a level above 0 is --log-level debug",
    ),
    TritonFlag(
        "--allow-http",
        "bool",
        lambda allow: {"enable_http": allow},
        "false: no HTTP listener (INFERPLEX_ENABLE_HTTP)",
    ),
    TritonFlag(
        "--allow-grpc",
        "bool",
        lambda allow: {"enable_grpc": allow},
        "false: no gRPC listener (INFERPLEX_ENABLE_GRPC)",
    ),
    TritonFlag(
        "--allow-metrics",
        "bool",
        lambda allow: {"enable_metrics": allow},
        "false: no metrics listener (INFERPLEX_ENABLE_METRICS)",
    ),
    TritonFlag(
        "--exit-on-error",
        "bool",
        lambda exit_: {"exit_on_error": exit_},
        "true: a model that fails to load at start stops the start (exit status 2); "
        "inferplex's default, unlike Triton's, serves the models that load",
    ),
    *(
        TritonFlag(
            f"--{listener}-address",
            "text",
            lambda address: {"host": address},
            f"the address the {listener} listener binds: inferplex binds HTTP, gRPC and "
            "metrics on one address (--host; Triton's default 0.0.0.0 is 127.0.0.1 here), so "
            "two different addresses are an error",
            one_of_several=True,
        )
        for listener in ("http", "grpc", "metrics")
    ),
    TritonFlag(
        "--backend-config",
        "repeated",
        None,
        "no effect: inferplex has none of Triton's per-backend settings; a model's backend "
        "settings go in its config's parameters (e.g. intra_op_thread_count)",
    ),
)


def triton_options(command: F) -> F:
    """Add the tritonserver flags to ``command``, after its own (each passes None, or ()
    when repeated, when not given)."""
    for flag in reversed(FLAGS):
        command = click.option(flag.name, flag.param, **_settings(flag))(command)
    return command


def _settings(flag: TritonFlag) -> dict[str, Any]:
    settings: dict[str, Any] = {"help": f"[tritonserver] {flag.why}", "default": None}
    if flag.takes == "bool":
        # Triton's booleans take a value (--allow-grpc=false); a bare flag means true
        settings.update(
            type=click.Choice([*_TRUE, *_FALSE], case_sensitive=False),
            is_flag=False,
            flag_value="true",
            metavar="BOOL",
        )
    elif flag.takes == "switch":
        settings.update(is_flag=True)
    elif flag.takes == "int":
        settings.update(type=int)
    elif flag.takes == "repeated":
        settings.update(multiple=True, default=(), metavar="TEXT")
    return settings


def take_triton_flags(options: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Remove the tritonserver flags from a command's ``options``: the ServerConfig settings
    they make, and one line per flag given that has no effect (for the log)."""
    settings: dict[str, Any] = {}
    set_by: dict[str, str] = {}  # setting -> the one-of-several flag that set it
    ignored: list[str] = []
    for flag in FLAGS:
        value = options.pop(flag.param, None)
        if value in (None, ()):
            continue
        if flag.takes == "bool":
            value = value.lower() in _TRUE
        if flag.sets is None:
            shown = ", ".join(value) if isinstance(value, tuple) else value
            ignored.append(f"tritonserver's {flag.name} ({shown}) is accepted; {flag.why}")
        else:
            for key, setting in flag.sets(value).items():
                if flag.one_of_several and key in set_by and settings[key] != setting:
                    raise click.UsageError(
                        f"tritonserver's {flag.name} ({value}) and {set_by[key]} "
                        f"({settings[key]}) both set --{key.replace('_', '-')}: give one value"
                    )
                settings[key] = setting
                if flag.one_of_several:
                    set_by[key] = flag.name
    return settings, ignored
