"""The model repository the integration tests serve, built with examples.modelgen."""

from __future__ import annotations

import shutil
from pathlib import Path

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex.datatypes import V2_DATATYPES

BROKEN_CONFIG = """
name: "broken"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_NOT_A_TYPE dims: [ 4 ] } ]
"""


def build_test_repository(repo: Path) -> Path:
    """add_sub, identity_<datatype> for every V2 datatype, slow, and a broken model."""
    path = modelgen.add_sub(repo)
    write_config(repo / "add_sub", modelgen.model_config(path, max_batch_size=8))
    for datatype in sorted(V2_DATATYPES):
        path = modelgen.identity(repo, datatype)
        write_config(path.parent.parent, modelgen.model_config(path, max_batch_size=8))
    path = modelgen.slow(repo, seconds=1.0)
    write_config(repo / "slow", modelgen.model_config(path, max_batch_size=8))
    broken = repo / "broken"
    modelgen.add_sub(repo, name="broken")
    (broken / "config.pbtxt").write_text(BROKEN_CONFIG)
    return repo


def copy_model(source: Path, target: Path) -> None:
    """Copy a model folder (config and versions) under a new name."""
    shutil.copytree(source, target)
