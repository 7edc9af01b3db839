"""PyTorch backend: TorchScript (``model.pt``) and torch.export (``model.pt2``) models.

torch is an optional extra (``pip install 'inferplex[torch]'``): this module imports it only
when a model asks for the backend, and a model that does so on a machine without torch fails
its load with an error that says how to install it.

Config: ``platform: "pytorch_libtorch"`` (Triton's name) or ``backend: "pytorch"``; the file
is ``model.pt`` unless ``default_model_filename`` names another (``model.pt2`` for an
exported program). A file ending in ``.pt2`` is loaded with ``torch.export.load``, anything
else with ``torch.jit.load``. The config must declare inputs and outputs: neither format
tells the datatypes and names a client needs.

How config tensors meet the model's arguments and results (decided once, at load):

- Inputs: when every config input name is an argument name of the model's ``forward``, by
  name (an argument before the last named one that the config leaves out gets None, so
  Optional arguments can be skipped); else when every name ends in ``__<index>`` (Triton's
  ``INPUT__0``, ``INPUT__1`` convention), by that index; else in config order.
- Outputs: a model returning a dict answers by key. Otherwise, when every config output name
  ends in ``__<index>`` (``OUTPUT__0``), that index into the returned tuple; else config order.
  A single tensor is a tuple of one.

Every numeric V2 datatype works (BOOL, INT8-64, UINT8-64, FP16, FP32, FP64); BYTES does not.

Threads: ``torch.set_num_threads`` sets the intra-op threads of the *calling* thread (ATen's
OpenMP backend keeps the count per thread) and the default of threads that start later. So
each instance sets its budget (``InstanceSpec.intra_op_threads``) in its own worker thread
before its first batch, and instances of different models keep their own counts. Inter-op
threads (used only by ``torch.jit.fork``) are left at torch's default.
"""

from __future__ import annotations

import inspect
import io
import re
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferplex.backends.base import Backend, InstanceSpec
from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.datatypes import V2_TO_NUMPY, V2_TO_TRITON
from inferplex.errors import ConfigError, ModelExecutionError
from inferplex.security.encryption import model_source

if TYPE_CHECKING:
    import torch

_INDEXED = re.compile(r".*__(\d+)$")


def _import_torch(model: str) -> Any:
    try:
        import torch
    except ImportError:
        raise ConfigError(
            f"model '{model}' needs the pytorch backend, but torch is not installed here; "
            "install it with: pip install 'inferplex[torch]'"
        ) from None
    return torch


class PyTorchBackend(Backend):
    names = ("pytorch",)
    platforms = ("pytorch_libtorch",)
    default_model_filename = "model.pt"

    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        torch = _import_torch(config.name)
        self._torch = torch
        self._name = config.name
        for tensor in (*config.input, *config.output):
            if tensor.data_type == "BYTES":
                raise ConfigError(
                    f"model '{config.name}': tensor '{tensor.name}' is BYTES; the pytorch "
                    "backend takes numeric tensors only"
                )
        if not config.input or not config.output:
            raise ConfigError(
                f"model '{config.name}': a pytorch model's config must declare its inputs and "
                "outputs (the model file does not tell their names and datatypes)"
            )
        self._device = _device(torch, instance, config.name)
        self._module, parameters = _load(torch, model_path, self._device, config.name)
        self._arguments = _argument_order(config.name, config.input, parameters)
        self._results = _result_indices(config.output)
        self._dtypes = {t.name: (t.data_type, V2_TO_NUMPY[t.data_type]) for t in config.output}
        self._threads = instance.intra_op_threads
        self._thread: int | None = None  # the worker thread whose thread count is set
        self._inference_mode = torch.inference_mode

    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        torch = self._torch
        if self._thread != threading.get_ident():  # first batch on this worker thread
            torch.set_num_threads(self._threads)
            self._thread = threading.get_ident()
        with self._inference_mode():
            args = [self._tensor(inputs.get(name)) for name in self._arguments]
            result = self._module(*args)
        return {name: self._pick(result, name) for name in outputs}

    def _tensor(self, array: np.ndarray | None) -> torch.Tensor | None:
        if array is None:  # an optional input the request left out
            return None
        # Wire data are read-only views of the request; torch cannot promise not to write
        # into its inputs (in-place ops), so those are copied.
        tensor = self._torch.from_numpy(array if array.flags.writeable else array.copy())
        return tensor if self._device.type == "cpu" else tensor.to(self._device)

    def _pick(self, result: Any, name: str) -> np.ndarray:
        if isinstance(result, dict):
            if name not in result:
                raise ModelExecutionError(
                    f"model '{self._name}' returned a dict without output '{name}' (its keys: "
                    f"{', '.join(map(str, result))})"
                )
            value = result[name]
        else:
            values = result if isinstance(result, tuple | list) else (result,)
            index = self._results[name]
            if index >= len(values):
                raise ModelExecutionError(
                    f"model '{self._name}' returned {len(values)} output(s), but output "
                    f"'{name}' is the one at index {index}"
                )
            value = values[index]
        if not isinstance(value, self._torch.Tensor):
            raise ModelExecutionError(
                f"model '{self._name}' output '{name}' is a {type(value).__name__}, not a tensor"
            )
        array = value.detach().cpu().numpy()
        datatype, dtype = self._dtypes[name]
        if array.dtype != dtype:
            # as Triton: a silent cast would truncate (float results declared INT32)
            raise ModelExecutionError(
                f"model '{self._name}' output '{name}' is {value.dtype}, but the config "
                f"declares {V2_TO_TRITON[datatype]} ({dtype}): fix the data_type or cast in "
                "the model"
            )
        return array

    def close(self) -> None:
        del self._module

    @classmethod
    def gpu_available(cls) -> bool:
        try:
            import torch
        except ImportError:
            return False
        return bool(torch.cuda.is_available())


def _device(torch: Any, instance: InstanceSpec, model: str) -> torch.device:
    if instance.kind != "KIND_GPU":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(
            f"model '{model}': instance_group kind KIND_GPU asks for CUDA, but torch "
            f"{torch.__version__} has no CUDA device here"
        )
    count = torch.cuda.device_count()
    if instance.device_id >= count:
        raise ConfigError(
            f"model '{model}': instance_group asks for GPU {instance.device_id}, but torch "
            f"sees {count} CUDA device(s)"
        )
    return torch.device("cuda", instance.device_id)


def _load(torch: Any, path: Path, device: torch.device, model: str) -> tuple[Any, list[str]]:
    """The callable module and the names of its forward's arguments."""
    source = model_source(path)
    # an encrypted file (inferplex encrypt) is decrypted in memory, never written out
    file: str | io.BytesIO = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        if path.suffix == ".pt2":
            program = torch.export.load(file)
            if device.type != "cpu":
                from torch.export.passes import move_to_device_pass

                program = move_to_device_pass(program, device)
            # an exported program keeps the train/eval mode it was exported in
            module = program.module()
            parameters = list(inspect.signature(module.forward).parameters)
        else:
            with warnings.catch_warnings():
                # TorchScript is deprecated in favour of torch.export, yet it is what Triton's
                # pytorch backend serves: keep loading it, without a warning per instance
                warnings.filterwarnings("ignore", "`torch.jit", DeprecationWarning)
                module = torch.jit.load(file, map_location=device)
            module.eval()
            parameters = [a.name for a in module.forward.schema.arguments[1:]]  # after self
    except Exception as exc:  # torch raises many kinds (RuntimeError, BadZipFile, ...)
        kind = "torch.export program" if path.suffix == ".pt2" else "TorchScript model"
        raise ConfigError(f"model '{model}': {path.name} is not a loadable {kind}: {exc}") from None
    return module, parameters


def _argument_order(
    model: str, inputs: tuple[TensorConfig, ...], parameters: list[str]
) -> list[str]:
    """Config input names in the order of the model's positional arguments."""
    names = [t.name for t in inputs]
    if len(names) > len(parameters):
        raise ConfigError(
            f"model '{model}': the config declares {len(names)} inputs but the model's "
            f"forward takes {len(parameters)} ({', '.join(parameters)})"
        )
    if set(names) <= set(parameters):
        # up to the last one named; an argument in between that the config does not declare
        # gets None (its default, for an Optional argument)
        last = max(parameters.index(name) for name in names)
        return parameters[: last + 1]
    indices = _indices(names)
    if indices is None:
        return names
    if sorted(indices.values()) != list(range(len(names))):
        raise ConfigError(
            f"model '{model}': input indices (the __<n> suffixes) must be 0 to "
            f"{len(names) - 1}, once each; got {', '.join(names)}"
        )
    return sorted(names, key=indices.__getitem__)


def _result_indices(outputs: tuple[TensorConfig, ...]) -> dict[str, int]:
    """Config output name -> index into the tuple the model returns."""
    names = [t.name for t in outputs]
    return _indices(names) or {name: i for i, name in enumerate(names)}


def _indices(names: list[str]) -> dict[str, int] | None:
    """The ``__<index>`` of every name, or None unless every name has one."""
    found = {}
    for name in names:
        match = _INDEXED.fullmatch(name)
        if match is None:
            return None
        found[name] = int(match.group(1))
    return found
