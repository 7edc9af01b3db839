"""ONNX Runtime execution providers for one instance, from the model's
``optimization.execution_accelerators`` (Triton's names and parameters).

GPU instances (kind KIND_GPU):

- ``tensorrt`` -> ``TensorrtExecutionProvider``. Parameters: ``precision_mode`` (``FP32``,
  ``FP16`` -> ``trt_fp16_enable``, ``INT8`` -> ``trt_int8_enable``),
  ``max_workspace_size_bytes`` (-> ``trt_max_workspace_size``),
  ``int8_calibration_table_name``, ``int8_use_native_calibration_table``, and any ONNX
  Runtime TensorRT option by its own ``trt_*`` name.
- ``cuda`` -> ``CUDAExecutionProvider`` with its parameters as ONNX Runtime's CUDA options.
- CUDA always follows the accelerators (TensorRT hands it what it cannot run), and every
  provider gets the instance's ``device_id``.

CPU instances: ``openvino`` -> ``OpenVINOExecutionProvider``, parameters passed as its
options (``device_type``, ``precision``, ``num_of_threads``, ...). The CPU provider always
comes last.

Accelerators of the other kind of device are not used, as in Triton, but their names and
parameters are checked all the same. An accelerator whose
provider this onnxruntime build lacks fails the load with a clear error, unless the model sets
the parameter ``execution_accelerator_fallback: "true"``: then it is skipped with a warning and
the session runs on the providers that remain. The same holds for a provider the build has but
that does not start (options it refuses, a device or a library missing): ONNX Runtime only
prints why and carries on without it, so ``check_started`` compares the session's providers
with those asked for.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import NamedTuple

from inferplex.backends.base import InstanceSpec
from inferplex.config.model_config import ModelConfig
from inferplex.config.optimization import Accelerator
from inferplex.errors import ConfigError

logger = logging.getLogger(__name__)

#: model parameter: "true" skips accelerators whose provider is missing instead of failing
FALLBACK_PARAMETER = "execution_accelerator_fallback"

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
OPENVINO = "OpenVINOExecutionProvider"

#: accelerator name -> provider, per kind of instance
GPU_ACCELERATORS = {"tensorrt": TENSORRT, "cuda": CUDA}
CPU_ACCELERATORS = {"openvino": OPENVINO}

_PRECISIONS = {"FP32": {}, "FP16": {"trt_fp16_enable": "True"}, "INT8": {"trt_int8_enable": "True"}}
_TENSORRT_RENAMED = {
    "max_workspace_size_bytes": "trt_max_workspace_size",
    "int8_calibration_table_name": "trt_int8_calibration_table_name",
    "int8_use_native_calibration_table": "trt_int8_use_native_calibration_table",
}

_SECTION = "optimization.execution_accelerators"

Provider = str | tuple[str, dict[str, str]]


def session_providers(
    config: ModelConfig, instance: InstanceSpec, available: Collection[str]
) -> list[Provider]:
    """The providers (with options) for a session of ``config`` on ``instance``, given the
    providers this onnxruntime build has (``onnxruntime.get_available_providers()``). Both
    kinds of accelerators are checked (a misspelt GPU accelerator fails on a CPU machine
    too, not first on the GPU box); those of the instance's kind are used."""
    accelerators = config.optimization.execution_accelerators if config.optimization else None
    fallback = _fallback(config)
    gpu = _declared(config, accelerators.gpu_execution_accelerator if accelerators else (), "gpu")
    cpu = _declared(config, accelerators.cpu_execution_accelerator if accelerators else (), "cpu")
    if instance.kind == "KIND_GPU":
        if CUDA not in available:
            raise ConfigError(
                "instance_group kind KIND_GPU asks for CUDA, but ONNX Runtime has no "
                f"CUDAExecutionProvider here (available: {', '.join(available)})"
            )
        device = {"device_id": str(instance.device_id)}
        providers = [
            (name, {**device, **options}) for name, options in _present(gpu, available, fallback)
        ]
        if all(name != CUDA for name, _ in providers):
            providers.append((CUDA, device))
        return [*providers, CPU]
    return [*_present(cpu, available, fallback), CPU]


def _fallback(config: ModelConfig) -> bool:
    value = config.parameters.get(FALLBACK_PARAMETER, "false").lower()
    if value not in ("true", "false"):
        raise ConfigError(
            f"model '{config.name}': parameter {FALLBACK_PARAMETER} must be true or false, "
            f"got '{value}'"
        )
    return value == "true"


class _Declared(NamedTuple):
    """An accelerator as asked for."""

    name: str
    provider: str
    options: dict[str, str]
    where: str
    """where the config names it, for errors"""


def _declared(
    config: ModelConfig, accelerators: tuple[Accelerator, ...], kind: str
) -> list[_Declared]:
    """The accelerators of one kind ("gpu" or "cpu") with their provider options;
    ConfigError naming the field for an unknown name or parameter."""
    known = GPU_ACCELERATORS if kind == "gpu" else CPU_ACCELERATORS
    declared: list[_Declared] = []
    for index, accelerator in enumerate(accelerators):
        where = f"model '{config.name}': {_SECTION}.{kind}_execution_accelerator[{index}]"
        provider = known.get(accelerator.name.lower())
        if provider is None:
            raise ConfigError(
                f"{where}: unknown accelerator '{accelerator.name}', expected one of "
                f"{', '.join(sorted(known))}"
            )
        options = (
            _tensorrt_options(accelerator, where)
            if provider == TENSORRT
            else dict(accelerator.parameters)
        )
        declared.append(_Declared(accelerator.name, provider, options, where))
    return declared


def _present(
    declared: list[_Declared], available: Collection[str], fallback: bool
) -> list[tuple[str, dict[str, str]]]:
    """The declared providers this onnxruntime build has; a missing one fails the load, or
    with ``fallback`` is left out with a warning."""
    providers: list[tuple[str, dict[str, str]]] = []
    for name, provider, options, where in declared:
        if provider not in available:
            if not fallback:
                raise ConfigError(
                    f"{where}: '{name}' needs ONNX Runtime's {provider}, "
                    f"which this onnxruntime build does not have (available: "
                    f"{', '.join(available)}); install an onnxruntime package with it, or set "
                    f'parameters {{ key: "{FALLBACK_PARAMETER}" value {{ string_value: "true" }} '
                    "} to run without it"
                )
            logger.warning(
                "%s: %s is not available here; running without it (%s)",
                where,
                provider,
                FALLBACK_PARAMETER,
            )
            continue
        providers.append((provider, options))
    return providers


def _tensorrt_options(accelerator: Accelerator, where: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for key, value in accelerator.parameters.items():
        if key == "precision_mode":
            try:
                options.update(_PRECISIONS[value.upper()])
            except KeyError:
                raise ConfigError(
                    f"{where}: tensorrt precision_mode must be FP32, FP16 or INT8, got '{value}'"
                ) from None
        elif key in _TENSORRT_RENAMED:
            options[_TENSORRT_RENAMED[key]] = value
        elif key.startswith("trt_"):
            options[key] = value
        else:
            accepted = ", ".join(["precision_mode", *_TENSORRT_RENAMED, "trt_* options"])
            raise ConfigError(
                f"{where}: unknown tensorrt parameter '{key}', expected one of {accepted}"
            )
    return options


def check_started(config: ModelConfig, asked: list[Provider], started: list[str]) -> None:
    """Fail the load when a provider in ``asked`` is not among the session's ``started``
    providers, unless the model declared the fallback (a GPU instance without CUDA fails
    either way: it would run on the CPU)."""
    names = [p if isinstance(p, str) else p[0] for p in asked]
    missing = [name for name in names if name not in started]
    if not missing:
        return
    message = (
        f"model '{config.name}': ONNX Runtime did not start {', '.join(missing)} and would run "
        f"the model on {', '.join(started)} (its own message just before this one in the "
        "server's log says why: an option it refused, a device or a library missing)"
    )
    if CUDA in missing or not _fallback(config):
        raise ConfigError(message)
    logger.warning("%s; running without it (%s)", message, FALLBACK_PARAMETER)
