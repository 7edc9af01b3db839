"""The backend interface: a backend loads one model version and runs batches of numpy arrays."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferplex.config.model_config import ModelConfig, TensorConfig


@dataclass(frozen=True)
class InstanceSpec:
    """Where and how one instance of a model runs."""

    kind: str = "KIND_CPU"
    device_id: int = 0
    intra_op_threads: int = 1


class Backend(abc.ABC):
    """One loaded instance of one model version.

    ``execute`` is called from the instance's dedicated worker thread, never from the event
    loop, and never concurrently on the same object.
    """

    #: names accepted in config ``backend`` (first is canonical) and ``platform``
    names: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    #: file name looked for in a version folder when the config names none
    default_model_filename: str = ""

    @abc.abstractmethod
    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        """Load the model file; raise an exception with a clear reason if it cannot be loaded."""

    @abc.abstractmethod
    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """Run one batch: input name -> array, returns the requested output name -> array."""

    def close(self) -> None:  # noqa: B027 - optional hook, most backends free on collection
        """Release the model's resources."""

    @classmethod
    def gpu_available(cls) -> bool:
        """Whether this backend can place instances on a GPU on this machine."""
        return False

    @classmethod
    def signature(cls, model_path: Path) -> tuple[list[TensorConfig], list[TensorConfig]] | None:
        """The inputs and outputs the model file itself declares, with the batch dimension
        included as the first dim; None if the format cannot tell."""
        return None
