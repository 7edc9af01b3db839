"""``tritonserver``'s flags, accepted by ``inferplex serve`` so a Triton start script runs
unchanged.

Many of Triton's flags are inferplex's own already, with the same names and meanings
(``--model-repository=DIR``, ``--http-port``, ``--grpc-port``, ``--metrics-port``,
``--model-control-mode``, ``--load-model``, ``--repository-poll-secs``, ``--log-file``,
``--model-config-name``, ``--http-restricted-api``, ``--grpc-restricted-protocol``;
``--log-format`` takes Triton's ``default`` and ``ISO8601`` too):
click reads ``--flag=value`` and ``--flag value`` alike. The others are in
:data:`~inferplex.cli.triton_table.FLAGS`: each sets ServerConfig fields, is accepted without
effect (the reason logged at start and shown in ``--help``), or stops the start where
ignoring it would silently change what the user relies on. A boolean takes Triton's
spellings (``=true``, ``=false``, ``=1``, ``=off``, ...) or no value (true). Where one of
inferplex's own flags sets the same field, inferplex's flag wins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from inferplex.cli.triton_combined import combine
from inferplex.cli.triton_spec import FALSE, TRUE, Effect, TritonFlag
from inferplex.cli.triton_table import FLAGS

__all__ = ["FLAGS", "TritonFlag", "take_triton_flags", "triton_options"]

F = TypeVar("F", bound=Callable[..., Any])


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
            type=click.Choice([*TRUE, *FALSE], case_sensitive=False),
            is_flag=False,
            flag_value="true",
            metavar="BOOL",
        )
    elif flag.takes == "switch":
        settings.update(is_flag=True)
    elif flag.takes in ("int", "float"):
        settings.update(type=int if flag.takes == "int" else float)
    elif flag.takes == "repeated":
        settings.update(multiple=True, default=(), metavar="TEXT")
    return settings


def take_triton_flags(options: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Remove the tritonserver flags from a command's ``options``: the ServerConfig settings
    they make, and one line per flag given that has no effect, or a part of it (for the
    log). click.UsageError for a value Triton refuses too, or a flag inferplex refuses."""
    settings: dict[str, Any] = {}
    set_by: dict[str, str] = {}  # setting -> the one-of-several flag that set it
    notes: list[str] = []
    _take_tritons_trace_rate(options, settings)
    for flag in FLAGS:
        value = options.pop(flag.param, None)
        if value in (None, ()):
            continue
        if flag.takes == "bool":
            value = value.lower() in TRUE
        shown = ", ".join(value) if isinstance(value, tuple) else value
        if flag.sets is None:
            notes.append(f"tritonserver's {flag.name} ({shown}) is accepted; {flag.why}")
            continue
        effect = flag.sets(value)
        if not isinstance(effect, Effect):
            effect = Effect(effect)
        notes.extend(f"tritonserver's {flag.name}: {note}" for note in effect.notes)
        for key, setting in effect.settings.items():
            if flag.one_of_several and key in set_by and settings[key] != setting:
                raise click.UsageError(
                    f"tritonserver's {flag.name} ({value}) and {set_by[key]} "
                    f"({settings[key]}) both set --{key.replace('_', '-')}: give one value"
                )
            settings[key] = setting
            if flag.one_of_several:
                set_by[key] = flag.name
    own = options.get("model_repository")
    if own is not None and settings.get("model_repository") not in (None, own):
        raise click.UsageError(
            f"--model-repository ({own}) and tritonserver's --model-store "
            f"({settings['model_repository']}): inferplex serves one model repository "
            "(tritonserver serves several)"
        )
    combined: list[str] = []
    combine(settings, combined)
    notes.extend(f"tritonserver's {note}" for note in combined)
    return settings, notes


def _take_tritons_trace_rate(options: dict[str, Any], settings: dict[str, Any]) -> None:
    """``--trace-rate`` is inferplex's (a share, 0 to 1) and Triton's (one request in N,
    1000 by default, on only with a trace level): a value above 1 is Triton's."""
    rate = options.get("trace_rate")
    if rate is not None and rate > 1:
        options["trace_rate"] = None
        settings["_trace_rate"] = str(int(rate)) if rate == int(rate) else str(rate)
