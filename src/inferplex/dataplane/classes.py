"""The classification extension answered (``classification.py`` has the pure functions):
the outputs a request asked for as their top classes, with the labels of the model's label
files, read once per configuration in a worker thread."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from inferplex.dataplane.classification import class_count, classify, read_labels
from inferplex.errors import ConfigError
from inferplex.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from inferplex.config.model_config import ModelConfig

logger = logging.getLogger(__name__)

#: model name -> the folder its configuration's files are in (label_filename), if known
Folders = Callable[[str], Path | None]


class Configs(Protocol):
    """Where a model version's configuration comes from: the engine."""

    def model_config(self, name: str, version: str = "") -> ModelConfig: ...


#: label files kept read, by configuration; the oldest goes first
_LABELS_KEPT = 64
#: outputs of up to this many elements are classified on the event loop; larger ones (the
#: sort and one string per class taken) in a worker thread, so one client's request for all
#: the classes of a large output never stalls the others
INLINE_CLASSIFY_ELEMENTS = 4096


class Classes:
    """Answers requests that ask for classes; ``folders`` says where a model's label files
    are (None: classes come without labels)."""

    __slots__ = ("_configs", "_folders", "_labels")

    def __init__(self, configs: Configs, folders: Folders | None) -> None:
        self._configs = configs
        self._folders = folders
        self._labels: dict[tuple[int, str], tuple[ModelConfig, Sequence[str] | None]] = {}

    async def classify(
        self, request: InferenceRequest, response: InferenceResponse
    ) -> InferenceResponse:
        """The answer to a request that asked for the top classes of some of its outputs
        (its outputs are ClassifiedOutputs when it came through a codec): those outputs
        as their classes, the others as they are."""
        counts = {out.name: class_count(out.name, out.parameters) for out in request.outputs}
        config = self._configs.model_config(response.model_name, response.model_version)
        outputs = []
        for tensor in response.outputs:
            count = counts.get(tensor.name, 0)
            if count:
                labels = await self._labels_of(config, tensor.name)
                batched = config.max_batch_size > 0
                if np.size(tensor.data) <= INLINE_CLASSIFY_ELEMENTS:
                    tensor = classify(tensor, count, batched, labels)
                else:
                    tensor = await asyncio.to_thread(classify, tensor, count, batched, labels)
            outputs.append(tensor)
        return InferenceResponse(
            response.model_name, response.model_version, outputs, response.id, response.parameters
        )

    async def _labels_of(self, config: ModelConfig, output: str) -> Sequence[str] | None:
        """The labels of an output of a model with ``config``: its label file, read once
        per configuration (a reload brings a new one), in a worker thread."""
        key = (id(config), output)
        known = self._labels.get(key)
        if known is not None and known[0] is config:
            return known[1]
        labels = None
        spec = next((t for t in config.output if t.name == output), None)
        folder = self._folders(config.name) if self._folders is not None else None
        if spec is not None and spec.label_filename and folder is not None:
            try:
                labels = await asyncio.to_thread(read_labels, folder, spec.label_filename)
            except (OSError, UnicodeDecodeError, ConfigError) as exc:
                logger.warning("model '%s': labels of '%s' not read: %s", config.name, output, exc)
        if len(self._labels) >= _LABELS_KEPT:
            del self._labels[next(iter(self._labels))]
        self._labels[key] = (config, labels)
        return labels
