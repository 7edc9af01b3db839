"""A candidate as a model configuration: served copies for measuring, and ``--write``.

The model's own configuration file (``config.pbtxt`` or ``config.yaml``) is read as a plain
dict (Triton's field names, as both formats use), the searched fields are set, and it is
rendered back in the same format. Only these fields change: ``max_batch_size``,
``dynamic_batching.max_queue_delay_microseconds``, ``instance_group`` (count, on the CPU)
and the ``intra_op_thread_count`` parameter. Comments in a ``config.pbtxt`` are not kept.

Measuring copies: each candidate is served as ``<model>__<key>`` in a temporary repository
whose version folders are links to the original ones (or, for INT8, hold the quantised
model), so one server measures a whole rung.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from inferplex.config.pbtxt import parse_pbtxt
from inferplex.config.readers import PBTXT_NAME, YAML_NAMES, config_from_dict
from inferplex.config.writers import Format, render
from inferplex.errors import ConfigError
from inferplex_tools.benchtool import BenchError
from inferplex_tools.tuner.space import Candidate

THREADS_PARAMETER = "intra_op_thread_count"
MODEL_FILENAME = "model.onnx"

#: makes an INT8 copy of a model file: (source, target) -> None
Quantizer = Callable[[Path, Path], None]


def config_file(model_dir: Path) -> tuple[Path, Format]:
    """The model's configuration file and its format; BenchError when it has none."""
    if (model_dir / PBTXT_NAME).is_file():
        return model_dir / PBTXT_NAME, "pbtxt"
    for name in YAML_NAMES:
        if (model_dir / name).is_file():
            return model_dir / name, "yaml"
    raise BenchError(
        f"{model_dir}: tune needs the model's config file ({PBTXT_NAME} or config.yaml) to "
        "write candidates from"
    )


def read_raw(model_dir: Path) -> tuple[dict[str, Any], Format]:
    """The configuration as a plain dict, and its format."""
    path, fmt = config_file(model_dir)
    text = path.read_text()
    try:
        raw = parse_pbtxt(text, str(path)) if fmt == "pbtxt" else yaml.safe_load(text) or {}
    except (ConfigError, yaml.YAMLError) as exc:
        raise BenchError(f"cannot read {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise BenchError(f"{path}: expected a configuration mapping")
    return raw, fmt


def apply(
    raw: dict[str, Any], candidate: Candidate, name: str, fmt: Format = "pbtxt"
) -> dict[str, Any]:
    """A copy of ``raw`` configured as ``candidate``, named ``name`` (new parameters in the
    format's usual spelling: a map in YAML, Triton's key/value list in pbtxt)."""
    config = copy.deepcopy(raw)
    config["name"] = name
    config["max_batch_size"] = candidate.max_batch_size
    if candidate.max_batch_size > 0:
        batching = config.get("dynamic_batching") or {}
        batching["max_queue_delay_microseconds"] = candidate.queue_delay_us
        config["dynamic_batching"] = batching
    config["instance_group"] = [{"kind": "KIND_CPU", "count": candidate.instances}]
    _set_parameter(config, THREADS_PARAMETER, str(candidate.threads), fmt)
    return config


def current_candidate(model_dir: Path) -> Candidate:
    """The model's own configuration as a candidate (its searched fields): no
    ``dynamic_batching`` reads as queue delay 0, no ``intra_op_thread_count`` as 0 threads
    (the server's choice), the instance count is the groups' total, the precision FP32."""
    raw, _ = read_raw(model_dir)
    path, _ = config_file(model_dir)
    try:
        config = config_from_dict(raw, raw.get("name") or model_dir.name, str(path))
    except ConfigError as exc:
        raise BenchError(f"cannot read {path}: {exc}") from None
    threads = config.parameters.get(THREADS_PARAMETER) or "0"
    if not threads.isdigit():
        raise BenchError(
            f"{path}: parameter {THREADS_PARAMETER} must be an integer >= 0, got '{threads}'"
        )
    batching = config.dynamic_batching
    return Candidate(
        max_batch_size=config.max_batch_size,
        queue_delay_us=batching.max_queue_delay_microseconds if batching else 0,
        instances=sum(g.count for g in config.instance_group) or 1,
        threads=int(threads),
    )


def _set_parameter(config: dict[str, Any], key: str, value: str, fmt: Format) -> None:
    """Set a string parameter in either spelling: a map, or Triton's list of key/value."""
    parameters = config.get("parameters")
    if parameters is None and fmt == "yaml":
        parameters = config["parameters"] = {}
    if isinstance(parameters, dict):
        parameters[key] = value
        return
    entries = [p for p in parameters or [] if p.get("key") != key]
    entries.append({"key": key, "value": {"string_value": value}})
    config["parameters"] = entries


def version_folders(model_dir: Path) -> list[Path]:
    return sorted(
        (p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()),
        key=lambda p: int(p.name),
    )


def materialise(
    model_dir: Path,
    candidates: Iterable[Candidate],
    target: Path,
    quantize: Quantizer | None,
) -> dict[Candidate, str]:
    """Write one served copy per candidate under ``target``; returns each one's model name."""
    raw, fmt = read_raw(model_dir)
    filename = raw.get("default_model_filename") or MODEL_FILENAME
    versions = version_folders(model_dir)
    if not versions:
        raise BenchError(f"{model_dir}: no version folders (1/, 2/, ...) to serve")
    names: dict[Candidate, str] = {}
    for candidate in candidates:
        name = f"{model_dir.name}__{candidate.key}"
        folder = target / name
        folder.mkdir(parents=True, exist_ok=True)
        for version in versions:
            link = folder / version.name
            if candidate.precision == "int8":
                if quantize is None:
                    raise BenchError("--precision int8: no INT8 quantiser is available")
                link.mkdir(exist_ok=True)
                _quiet(quantize, version / filename, link / filename)
            elif not link.exists():
                link.symlink_to(version.resolve(), target_is_directory=True)
        (folder / f"config.{fmt}").write_text(render(apply(raw, candidate, name, fmt), fmt))
        names[candidate] = name
    return names


def write_best(model_dir: Path, candidate: Candidate, quantize: Quantizer | None) -> list[Path]:
    """Configure the model itself as ``candidate`` (same file, same format); an INT8 winner
    also gets its quantised model as a new version. Returns the paths written."""
    raw, fmt = read_raw(model_dir)
    path, _ = config_file(model_dir)
    written = []
    if candidate.precision == "int8":
        if quantize is None:
            raise BenchError("--write: the best candidate is INT8 but no quantiser is available")
        filename = raw.get("default_model_filename") or MODEL_FILENAME
        latest = version_folders(model_dir)[-1]
        new = model_dir / str(int(latest.name) + 1)
        new.mkdir()
        _quiet(quantize, latest / filename, new / filename)
        written.append(new / filename)
    path.write_text(render(apply(raw, candidate, raw.get("name") or model_dir.name, fmt), fmt))
    written.append(path)
    return written


def _quiet(quantize: Quantizer, source: Path, target: Path) -> None:
    """Quantise without ONNX Runtime's advice on the root logger, once per candidate."""
    logging.disable(logging.WARNING)
    try:
        quantize(source, target)
    finally:
        logging.disable(logging.NOTSET)


class Int8Quantizer:
    """INT8 copies of ONNX models with ``inferplex optimize``'s method choice: static
    quantisation for convolution graphs (calibrated on synthetic inputs: the tuner measures
    speed; check accuracy with ``inferplex optimize --eval``), dynamic for MatMul-heavy ones."""

    CALIBRATION_ROWS = 32

    def __init__(self) -> None:
        from inferplex_tools.optimize import data, quantize

        self._data = data
        self._quantize = quantize

    def refusal(self, source: Path) -> str | None:
        """Why this model cannot be quantised usefully, or None."""
        import onnx

        from inferplex.errors import InvalidInputError

        try:
            self._quantize.choose_method(onnx.load(str(source), load_external_data=False))
        except InvalidInputError as exc:
            return exc.message
        return None

    def __call__(self, source: Path, target: Path) -> None:
        import onnx

        model = onnx.load(str(source), load_external_data=False)
        if self._quantize.choose_method(model).method == "static":
            rows = self._data.synthetic(self._data.input_specs(model), self.CALIBRATION_ROWS)
            self._quantize.quantize_static_int8(source, target, rows)
        else:
            self._quantize.quantize_dynamic_int8(source, target)


def int8_quantizer() -> tuple[Int8Quantizer | None, str]:
    """The INT8 quantiser when ``inferplex optimize`` is installed, else None and why."""
    try:
        quantizer = Int8Quantizer()
    except ImportError as exc:
        return None, f"INT8 skipped: inferplex_tools.optimize is not available ({exc})"
    return quantizer, "INT8 with inferplex optimize's method choice (static or dynamic)"


def model_file(model_dir: Path) -> Path:
    """The latest version's model file."""
    raw, _ = read_raw(model_dir)
    filename = raw.get("default_model_filename") or MODEL_FILENAME
    return version_folders(model_dir)[-1] / filename
