"""What a load reads from the repository, off the event loop: the model's plan, each
version's fingerprint and size on disk, its warm-up requests (loader.py runs it in a load
thread, one trip per model, or per chunk of models at start)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from inferplex.config.model_config import ModelConfig
from inferplex.config.paths import name_problem
from inferplex.lifecycle.planning import ModelPlan, plan_model
from inferplex.lifecycle.warmup import warmup_requests
from inferplex.repository.local import digest, list_files
from inferplex.types import InferenceRequest


class VersionFacts(NamedTuple):
    """One version's files: their fingerprint and their size on disk."""

    fingerprint: str
    size: int


#: per version, its files
Facts = dict[int, VersionFacts]
Warmup = list[InferenceRequest]


class Read(NamedTuple):
    """What a load reads of a model."""

    plan: ModelPlan
    facts: Facts
    warmup: Warmup


class ReadAhead(NamedTuple):
    """What :func:`read_model` returns: the folder's fingerprint, and the read or why it
    failed."""

    fingerprint: str
    read: Read | Exception


def read_many(
    repository: Path,
    names: list[str],
    intra_op_threads: int,
    auto_complete: bool,
    max_instances: int,
) -> dict[str, ReadAhead]:
    """:func:`read_model` of each of ``names`` that is a model folder in ``repository``."""
    out = {}
    for name in names:
        folder = repository / name
        # names ``ModelLoader.model_dir`` refuses are left to the load, to say so
        if name_problem(name) is None and not name.startswith((".", "_")) and folder.is_dir():
            out[name] = read_model(
                folder, folder, intra_op_threads, None, auto_complete, max_instances
            )
    return out


def read_model(
    model_dir: Path,
    folder: Path,
    intra_op_threads: int,
    override: ModelConfig | None,
    auto_complete: bool,
    max_instances: int,
) -> ReadAhead:
    """Everything a load reads from the repository, in one trip to a worker thread: the
    fingerprint of the model's ``folder`` in the repository, then the plan, each version's
    fingerprint and size on disk (the least its footprint can be) and the warm-up requests,
    or why they could not be read (the fingerprint is kept either way)."""
    in_folder = list_files(folder)
    folder_fingerprint = digest(in_folder, folder.parent)
    try:
        in_model_dir = in_folder if model_dir == folder else list_files(model_dir)
        plan = plan_model(
            model_dir, intra_op_threads, override, auto_complete, in_model_dir, max_instances
        )
        facts: Facts = {}
        for version, path in plan.version_files.items():
            files = [f for f in in_model_dir if f.path.is_relative_to(path.parent)]
            facts[version] = VersionFacts(digest(files, model_dir), sum(f.size for f in files))
        return ReadAhead(
            folder_fingerprint, Read(plan, facts, warmup_requests(plan.config, model_dir))
        )
    except Exception as exc:  # raised on the loop, after the fingerprint is recorded
        return ReadAhead(folder_fingerprint, exc)
