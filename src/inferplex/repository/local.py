"""A local model repository in Triton's layout: ``DIR/<model>/config.*`` and
``DIR/<model>/<version>/<model file>``."""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from inferplex.backends import Backend, InstanceSpec, backend_for, backend_for_file
from inferplex.backends.isolated import served_backend
from inferplex.config.model_config import InstanceGroup, ModelConfig
from inferplex.config.paths import inside, name_problem
from inferplex.config.readers import complete_config, read_model_config
from inferplex.errors import ConfigError
from inferplex.repository.placement import auto_kind, model_bytes
from inferplex.resilience.guard import check_parameters

logger = logging.getLogger(__name__)

#: Triton's ONNX Runtime backend parameter for the threads of one session
INTRA_OP_PARAMETER = "intra_op_thread_count"
#: model parameter: "true" lets a KIND_GPU group run on the CPU where there is no GPU
CPU_FALLBACK_PARAMETER = "allow_cpu_fallback"
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


def list_models(repository: Path) -> list[Path]:
    """The model folders of a repository, sorted by name (hidden folders skipped)."""
    if not repository.is_dir():
        raise ConfigError(f"model repository '{repository}' is not a folder")
    found = []
    for path in sorted(repository.iterdir()):
        if not path.is_dir() or path.name.startswith((".", "_")):
            continue
        problem = name_problem(path.name)
        if problem is not None:  # a folder no client could name (a control character)
            logger.warning("repository: skipping folder %r: %s", path.name, problem)
            continue
        found.append(path)
    return found


def _version_dirs(model_dir: Path) -> dict[int, Path]:
    return {int(p.name): p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()}


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


@dataclass(frozen=True)
class FileFacts:
    """A file as change detection sees it."""

    path: Path
    size: int
    mtime_ns: int


def list_files(path: Path) -> list[FileFacts]:
    """Every file in the folder ``path`` and its subfolders (or ``path`` itself, a file),
    sorted by path, with size and modification time: one read per folder and one stat per
    file. Blocking. A load reads a model's folder beside busy serving, where each file
    system call hands the GIL over and back (docs/lifecycle.md): one walk serves the load's
    fingerprints and sizes."""
    try:
        if not path.is_dir():
            stat = path.stat()
            return [FileFacts(path, stat.st_size, stat.st_mtime_ns)]
    except OSError:  # removed while we looked: the next scan sees the rest of the change
        return []
    found: list[FileFacts] = []
    folders = [path]
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):  # as rglob: no loops through links
                    folders.append(Path(entry.path))
                elif entry.is_file():
                    stat = entry.stat()
                    found.append(FileFacts(Path(entry.path), stat.st_size, stat.st_mtime_ns))
            except OSError:
                continue
    found.sort(key=lambda f: f.path)
    return found


def digest(files: list[FileFacts], root: Path) -> str:
    """A digest of ``files`` as far as change detection needs: each one's path relative to
    ``root``, size and modification time."""
    hasher = hashlib.blake2b(digest_size=16)
    for file in files:
        hasher.update(f"{file.path.relative_to(root)}\0{file.size}\0{file.mtime_ns}\n".encode())
    return hasher.hexdigest()


def fingerprint(path: Path) -> str:
    """A digest of a folder's (or file's) contents as far as change detection needs: every
    file's relative path, size and modification time. Blocking (walks the folder)."""
    return digest(list_files(path), path.parent)


def scan_repository(repository: Path) -> dict[str, str]:
    """Each model folder of the repository and the fingerprint of its contents."""
    return {model_dir.name: fingerprint(model_dir) for model_dir in list_models(repository)}


def plan_model(
    model_dir: Path, server_intra_op_threads: int = 0, override: ModelConfig | None = None
) -> ModelPlan:
    """Read and complete the model's config and find its files; ConfigError with the reason
    if the model cannot be served. ``override`` replaces the config file (Triton's load
    request with a config). Blocking (reads files): call it off the event loop."""
    name = model_dir.name
    config = override if override is not None else read_model_config(model_dir)
    versions = _version_dirs(model_dir)
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
    signature = backend.signature(files[max(files)])
    if signature is not None:
        config = complete_config(config, name, *signature)
    elif config is None:
        raise ConfigError(
            f"model '{name}' has no config file and its format cannot describe itself"
        )
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
        group = InstanceGroup(count=COMPOSITE_INSTANCES, kind="KIND_CPU")
        config = config.model_copy(update={"instance_group": (group,)})
    gpu = backend.gpu_available()
    size = model_bytes(files[max(files)]) if gpu else 0  # only KIND_AUTO on a GPU asks
    check_parameters(config)  # breaker and timeout parameters (resilience/guard.py)
    instances = _instances(config, server_intra_op_threads, gpu, size)
    return ModelPlan(config, served_backend(backend, config), files, instances)


def _instances(
    config: ModelConfig, server_intra_op_threads: int, gpu: bool, size: int = 0
) -> tuple[InstanceSpec, ...]:
    """One spec per instance. KIND_AUTO means a GPU where there is one for a heavy model of
    ``size`` bytes, else the CPU (repository/placement.py); a KIND_GPU group on a machine
    without one fails the model, or runs on the CPU when the model sets the parameter
    allow_cpu_fallback."""
    groups = config.instance_group or (InstanceGroup(),)
    threads = _intra_op_threads(config, server_intra_op_threads, sum(g.count for g in groups))
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


def _intra_op_threads(config: ModelConfig, server_setting: int, instances: int) -> int:
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
    # Instances of one model share the cores rather than oversubscribe them.
    return max(1, (os.cpu_count() or 1) // instances)
