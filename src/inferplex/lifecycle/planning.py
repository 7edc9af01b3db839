"""Planning a model's load: from a model folder (found by repository/), what to load and how:
the completed config, the backend that serves it, the files of the versions its policy
selects, and one spec per instance (kind, device, threads; KIND_AUTO by placement.py).
Backend and resilience parameters are checked here, so a model that cannot be served fails
its load with the reason before anything is started."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inferplex.backends import Backend, InstanceSpec, backend_for, backend_for_file
from inferplex.backends.isolated import served_backend
from inferplex.config.model_config import InstanceGroup, ModelConfig
from inferplex.config.paths import inside
from inferplex.config.readers import complete_config, read_model_config
from inferplex.config.server_config import DEFAULT_MAX_MODEL_INSTANCES
from inferplex.errors import ConfigError
from inferplex.lifecycle.data_files import initial_states
from inferplex.lifecycle.placement import auto_kind, model_bytes
from inferplex.repository.local import FileFacts, version_dirs
from inferplex.resilience.guard import check_parameters

logger = logging.getLogger(__name__)

#: Triton's ONNX Runtime backend parameter for the threads of one session
INTRA_OP_PARAMETER = "intra_op_thread_count"
#: model parameter: "true" lets a KIND_GPU group run on the CPU where there is no GPU
CPU_FALLBACK_PARAMETER = "allow_cpu_fallback"
#: below this size (the version folder's files) a model computes too little per batch for
#: intra-op threads to pay back their hand-offs, and hundreds of such models would each
#: start their own: its instances get one intra-op thread unless the config or the server
#: sets a count
LIGHT_MODEL_BYTES = 1_000_000

#: instances of a composite model (pipeline, cascade, remote) whose config sets none: the
#: batches it can have in flight at once
COMPOSITE_INSTANCES = 8


@dataclass(frozen=True)
class ModelPlan:
    """What to load for one model: its completed config, backend and version files."""

    config: ModelConfig
    backend: type[Backend]
    version_files: dict[int, Path]
    instances: tuple[InstanceSpec, ...]
    #: a sequence model's initial states read from data files, by state input name
    initial_states: dict[str, np.ndarray] = field(default_factory=dict)


def _detect_backend(model_dir: Path, versions: dict[int, Path]) -> type[Backend]:
    for version_dir in versions.values():
        for file in sorted(version_dir.iterdir()):
            cls = backend_for_file(file.name)
            if cls is not None:
                return cls
    raise ConfigError(
        f"model '{model_dir.name}' has no config naming a backend and no known model file "
        "(e.g. 1/model.onnx) in its version folders"
    )


def plan_model(
    model_dir: Path,
    server_intra_op_threads: int = 0,
    override: ModelConfig | None = None,
    auto_complete: bool = True,
    listed: Sequence[FileFacts] | None = None,
    max_instances: int = DEFAULT_MAX_MODEL_INSTANCES,
) -> ModelPlan:
    """Read and complete the model's config and find its files; ConfigError with the reason
    if the model cannot be served. ``override`` replaces the config file (Triton's load
    request with a config); ``auto_complete`` False (``--disable-auto-complete-config``)
    takes the config as written, which must then exist; ``listed``, the model folder's files
    as the caller walked them (their sizes serve); ``max_instances``, the most instances the
    config may ask for (--max-model-instances). Blocking (reads files): call it off the
    event loop."""
    name = model_dir.name
    config = override if override is not None else read_model_config(model_dir)
    versions = version_dirs(model_dir)
    if not versions:
        raise ConfigError(f"model '{name}' has no version folder (expected e.g. {name}/1/)")
    backend = (
        backend_for(config)
        if config and (config.backend or config.platform)
        else (_detect_backend(model_dir, versions))
    )
    filename = (config.default_model_filename if config else "") or backend.default_model_filename
    selected = (config.version_policy if config else ModelConfig(name=name).version_policy).select(
        list(versions)
    )
    # the config may be a client's (the load API): its file stays in the version folder
    files = {
        v: inside(versions[v], filename, "default_model_filename", model_dir) for v in selected
    }
    missing = [str(p.relative_to(model_dir.parent)) for p in files.values() if not p.exists()]
    if missing:
        raise ConfigError(f"model '{name}': model file(s) not found: {', '.join(missing)}")
    if not files:
        raise ConfigError(
            f"model '{name}': version_policy selects none of the versions on disk "
            f"({sorted(versions)})"
        )
    config = _completed(config, name, backend, files[max(files)], auto_complete)
    # both names filled in, as Triton renders a config (platform onnxruntime_onnx, backend
    # onnxruntime; an ensemble's backend stays empty): clients that read either one see what
    # serves the model
    names = {
        **(
            {} if config.backend or config.platform == "ensemble" else {"backend": backend.names[0]}
        ),
        **({} if config.platform or not backend.platforms else {"platform": backend.platforms[0]}),
    }
    if names:
        config = config.model_copy(update=names)
    if not config.default_model_filename:
        config = config.model_copy(update={"default_model_filename": filename})
    if config.unsupported_fields:
        logger.warning(
            "model '%s': config fields not honoured: %s", name, ", ".join(config.unsupported_fields)
        )
    if backend.composite and not config.instance_group:
        # a composite instance is a thread waiting on the models it calls: without enough of
        # them, concurrent requests would wait for each other's whole pipeline
        group = InstanceGroup(count=min(COMPOSITE_INSTANCES, max_instances), kind="KIND_CPU")
        config = config.model_copy(update={"instance_group": (group,)})
    gpu = backend.gpu_available()
    size = model_bytes(files[max(files)], listed)
    check_parameters(config)  # breaker and timeout parameters (resilience/guard.py)
    check_instance_count(config.name, sum(g.count for g in config.instance_group), max_instances)
    instances = _instances(config, server_intra_op_threads, gpu, size)
    served = served_backend(backend, config)
    _check_decoupled(config, served)
    return ModelPlan(config, served, files, instances, initial_states(config, model_dir))


def _check_decoupled(config: ModelConfig, backend: type[Backend]) -> None:
    """A decoupled model needs a backend that sends responses of its own."""
    if config.model_transaction_policy.decoupled and not backend.decoupled:
        raise ConfigError(
            f"model '{config.name}': {config.backend or config.platform} cannot serve a "
            "decoupled model (model_transaction_policy { decoupled: true }); the python "
            "backend can"
        )


def _completed(
    config: ModelConfig | None,
    name: str,
    backend: type[Backend],
    model_file: Path,
    auto_complete: bool,
) -> ModelConfig:
    """The config (None: no config file) completed from the model file: its signature (ONNX,
    as Triton's auto-complete) or the model's own completion (a Python model's
    ``auto_complete_config``); as written when ``auto_complete`` is off."""
    if not auto_complete:
        if config is None:
            raise ConfigError(
                f"model '{name}' has no config file, and configs are not completed from the "
                "model (--disable-auto-complete-config / --strict-model-config)"
            )
        return config
    signature = backend.signature(model_file)
    if signature is not None:
        return complete_config(config, name, *signature)
    completed = backend.auto_complete(config, name, model_file)
    if completed is None:
        raise ConfigError(
            f"model '{name}' has no config file and its format cannot describe itself "
            "(a Python model can, with auto_complete_config)"
        )
    return completed


def check_instance_count(name: str, count: int, limit: int) -> None:
    """ConfigError (a 400 for a load) when a model asks for more than ``limit`` instances
    per version: each is a backend session and a thread or process, made before the load
    can fail for any other reason (100,000 of them took 7 GB and went on)."""
    if count > limit:
        raise ConfigError(
            f"model '{name}' asks for {count} instances per version, above the limit of "
            f"{limit} (--max-model-instances, INFERPLEX_MAX_MODEL_INSTANCES)"
        )


def _instances(
    config: ModelConfig, server_intra_op_threads: int, gpu: bool, size: int = 0
) -> tuple[InstanceSpec, ...]:
    """One spec per instance. KIND_AUTO means a GPU where there is one for a heavy model of
    ``size`` bytes, else the CPU (lifecycle/placement.py); a KIND_GPU group on a machine
    without one fails the model, or runs on the CPU when the model sets the parameter
    allow_cpu_fallback."""
    groups = config.instance_group or (InstanceGroup(),)
    threads = _intra_op_threads(config, server_intra_op_threads, sum(g.count for g in groups), size)
    specs: list[InstanceSpec] = []
    for index, group in enumerate(groups):
        kind = group.kind
        if kind == "KIND_AUTO":
            kind = auto_kind(config, group, size, gpu)
        elif kind == "KIND_MODEL":
            kind = "KIND_CPU"
        if kind == "KIND_GPU" and not gpu:
            if config.parameters.get(CPU_FALLBACK_PARAMETER, "").lower() != "true":
                raise ConfigError(
                    f"model '{config.name}': instance_group[{index}] asks for KIND_GPU but "
                    f"its backend ('{config.backend or config.platform}') finds no GPU here "
                    "(ONNX Runtime: no CUDA execution provider; torch: no CUDA device); set "
                    "parameters { key: "
                    f'"{CPU_FALLBACK_PARAMETER}" value {{ string_value: "true" }} }} to run on '
                    "the CPU instead"
                )
            logger.warning(
                "model '%s': no GPU here, instance_group[%d] runs on the CPU (%s)",
                config.name,
                index,
                CPU_FALLBACK_PARAMETER,
            )
            kind = "KIND_CPU"
        devices = group.gpus or (0,)
        for i in range(group.count):
            specs.append(InstanceSpec(kind, devices[i % len(devices)], threads))
    return tuple(specs)


def _intra_op_threads(config: ModelConfig, server_setting: int, instances: int, size: int) -> int:
    value = config.parameters.get(INTRA_OP_PARAMETER)
    if value is not None:
        try:
            threads = int(value)
        except ValueError:
            raise ConfigError(
                f"model '{config.name}': parameter {INTRA_OP_PARAMETER} must be an integer, "
                f"got '{value}'"
            ) from None
        if threads > 0:
            return threads
    if server_setting > 0:
        return server_setting
    if size < LIGHT_MODEL_BYTES:  # a second thread would only wait: one per instance
        return 1
    # Instances of one model share the cores rather than oversubscribe them.
    return max(1, (os.cpu_count() or 1) // instances)
