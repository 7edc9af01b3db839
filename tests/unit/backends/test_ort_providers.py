"""ONNX Runtime providers from Triton's optimization.execution_accelerators: the config as
both file formats read it, the provider lists per kind of instance, and the errors and the
declared fallback when a provider is missing. The provider set of a GPU build is given
explicitly, so the GPU decisions are checked on any machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from examples import modelgen
from inferplex.backends.base import InstanceSpec
from inferplex.backends.onnxruntime import OnnxRuntimeBackend
from inferplex.backends.ort_providers import (
    FALLBACK_PARAMETER,
    check_started,
    session_providers,
)
from inferplex.config.model_config import ModelConfig
from inferplex.config.pbtxt import parse_pbtxt
from inferplex.config.readers import config_from_dict, read_model_config
from inferplex.errors import ConfigError
from inferplex.protocol.v2.grpc_messages import encode_model_config

CPU_BUILD = ["CPUExecutionProvider"]
GPU_BUILD = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
OPENVINO_BUILD = ["OpenVINOExecutionProvider", "CPUExecutionProvider"]
GPU = InstanceSpec("KIND_GPU", device_id=1)
CPU = InstanceSpec("KIND_CPU")

TRITON_EXAMPLE = """
name: "m"
platform: "onnxruntime_onnx"
optimization { execution_accelerators {
  gpu_execution_accelerator : [ {
    name : "tensorrt"
    parameters { key: "precision_mode" value: "FP16" }
    parameters { key: "max_workspace_size_bytes" value: "1073741824" }
  } ]
  cpu_execution_accelerator : [ { name : "openvino" } ]
} }
"""


def config(
    gpu: list[dict[str, Any]] | None = None,
    cpu: list[dict[str, Any]] | None = None,
    **parameters: str,
) -> ModelConfig:
    accelerators = {
        "gpu_execution_accelerator": gpu or [],
        "cpu_execution_accelerator": cpu or [],
    }
    return ModelConfig.model_validate(
        {
            "name": "m",
            "optimization": {"execution_accelerators": accelerators},
            "parameters": parameters,
        }
    )


def test_triton_config_is_read_and_rendered_back() -> None:
    parsed = config_from_dict(parse_pbtxt(TRITON_EXAMPLE, "m/config.pbtxt"), "m", "m/config.pbtxt")
    assert parsed.optimization is not None
    accelerators = parsed.optimization.execution_accelerators
    assert accelerators.gpu_execution_accelerator[0].name == "tensorrt"
    assert accelerators.gpu_execution_accelerator[0].parameters == {
        "precision_mode": "FP16",
        "max_workspace_size_bytes": "1073741824",
    }
    assert [a.name for a in accelerators.cpu_execution_accelerator] == ["openvino"]
    assert parsed.unsupported_fields == ()
    rendered = parsed.to_triton_dict()["optimization"]["execution_accelerators"]
    assert rendered["cpu_execution_accelerator"] == [{"name": "openvino", "parameters": {}}]


def test_yaml_reads_the_same_and_other_optimization_fields_are_listed(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.yaml").write_text(
        "optimization:\n"
        "  graph: {level: 1}\n"
        "  execution_accelerators:\n"
        "    gpu_execution_accelerator:\n"
        "      - {name: tensorrt, parameters: {precision_mode: INT8}}\n"
    )
    parsed = read_model_config(tmp_path / "m")
    assert parsed is not None and parsed.optimization is not None
    trt = parsed.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert trt.parameters == {"precision_mode": "INT8"}
    assert parsed.unsupported_fields == ("optimization.graph (not supported yet)",)


def test_bad_accelerator_entries_name_the_field() -> None:
    text = "optimization { execution_accelerators { gpu_execution_accelerator [ { nme: 'x' } ] } }"
    with pytest.raises(ConfigError, match=r"gpu_execution_accelerator\[0\].*name"):
        config_from_dict(parse_pbtxt(text, "m/config.pbtxt"), "m", "m/config.pbtxt")


def test_cpu_instances_without_accelerators_use_the_cpu_provider() -> None:
    assert session_providers(ModelConfig(name="m"), CPU, CPU_BUILD) == ["CPUExecutionProvider"]


def test_tensorrt_fp16_then_cuda_then_cpu_on_the_instance_device() -> None:
    trt = {
        "name": "tensorrt",
        "parameters": {"precision_mode": "FP16", "trt_engine_cache_enable": "true"},
    }
    providers = session_providers(config(gpu=[trt]), GPU, GPU_BUILD)
    assert providers == [
        (
            "TensorrtExecutionProvider",
            {"device_id": "1", "trt_fp16_enable": "True", "trt_engine_cache_enable": "true"},
        ),
        ("CUDAExecutionProvider", {"device_id": "1"}),
        "CPUExecutionProvider",
    ]


def test_tensorrt_int8_with_its_calibration_table() -> None:
    parameters = {
        "precision_mode": "INT8",
        "int8_calibration_table_name": "calib.flatbuffers",
        "max_workspace_size_bytes": "2147483648",
    }
    providers = session_providers(
        config(gpu=[{"name": "tensorrt", "parameters": parameters}]), GPU, GPU_BUILD
    )
    assert providers[0] == (
        "TensorrtExecutionProvider",
        {
            "device_id": "1",
            "trt_int8_enable": "True",
            "trt_int8_calibration_table_name": "calib.flatbuffers",
            "trt_max_workspace_size": "2147483648",
        },
    )


def test_cuda_accelerator_passes_its_options_and_is_not_repeated() -> None:
    cuda = {"name": "cuda", "parameters": {"cudnn_conv_algo_search": "HEURISTIC"}}
    providers = session_providers(config(gpu=[cuda]), GPU, GPU_BUILD)
    assert providers == [
        ("CUDAExecutionProvider", {"device_id": "1", "cudnn_conv_algo_search": "HEURISTIC"}),
        "CPUExecutionProvider",
    ]


def test_gpu_instances_without_accelerators_use_cuda() -> None:
    assert session_providers(config(cpu=[{"name": "openvino"}]), GPU, GPU_BUILD) == [
        ("CUDAExecutionProvider", {"device_id": "1"}),
        "CPUExecutionProvider",
    ]


def test_openvino_on_cpu_instances_and_gpu_accelerators_ignored_there() -> None:
    openvino = {"name": "openvino", "parameters": {"device_type": "CPU", "precision": "FP32"}}
    providers = session_providers(
        config(gpu=[{"name": "tensorrt"}], cpu=[openvino]), CPU, OPENVINO_BUILD
    )
    assert providers == [
        ("OpenVINOExecutionProvider", {"device_type": "CPU", "precision": "FP32"}),
        "CPUExecutionProvider",
    ]


def test_missing_provider_is_a_load_error_naming_the_fix() -> None:
    with pytest.raises(ConfigError) as info:
        session_providers(config(cpu=[{"name": "openvino"}]), CPU, CPU_BUILD)
    message = info.value.message
    assert (
        "cpu_execution_accelerator[0]: 'openvino' needs ONNX Runtime's OpenVINOExecutionProvider"
        in message
    )
    assert FALLBACK_PARAMETER in message


def test_declared_fallback_skips_a_missing_provider(caplog: pytest.LogCaptureFixture) -> None:
    declared = config(cpu=[{"name": "openvino"}], **{FALLBACK_PARAMETER: "true"})
    assert session_providers(declared, CPU, CPU_BUILD) == ["CPUExecutionProvider"]
    assert "OpenVINOExecutionProvider is not available here" in caplog.text
    cuda_only = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    trt = config(gpu=[{"name": "tensorrt"}], **{FALLBACK_PARAMETER: "true"})
    assert session_providers(trt, GPU, cuda_only)[0] == (
        "CUDAExecutionProvider",
        {"device_id": "1"},
    )


def test_gpu_instance_without_cuda_is_a_load_error() -> None:
    with pytest.raises(ConfigError, match="KIND_GPU asks for CUDA"):
        session_providers(config(gpu=[{"name": "tensorrt"}]), GPU, CPU_BUILD)


def test_a_provider_that_did_not_start_fails_the_load() -> None:
    """ONNX Runtime drops a provider whose options it refuses (or whose device or library is
    missing) and runs on the rest; the load fails instead, naming what did not start."""
    asked = session_providers(config(cpu=[{"name": "openvino"}]), CPU, OPENVINO_BUILD)
    check_started(config(), asked, ["OpenVINOExecutionProvider", "CPUExecutionProvider"])
    with pytest.raises(ConfigError) as info:
        check_started(config(), asked, ["CPUExecutionProvider"])
    assert "did not start OpenVINOExecutionProvider and would run the model on " in str(
        info.value.message
    )
    assert "CPUExecutionProvider" in info.value.message


def test_declared_fallback_runs_without_a_provider_that_did_not_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    declared = config(gpu=[{"name": "tensorrt"}], **{FALLBACK_PARAMETER: "true"})
    asked = session_providers(declared, GPU, GPU_BUILD)
    check_started(declared, asked, ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert "did not start TensorrtExecutionProvider" in caplog.text
    # a GPU instance without CUDA would run on the CPU: no fallback covers that
    with pytest.raises(ConfigError, match="did not start TensorrtExecutionProvider, CUDA"):
        check_started(declared, asked, ["CPUExecutionProvider"])


@pytest.mark.parametrize(
    ("accelerator", "kind", "message"),
    [
        ({"name": "tpu"}, "gpu", "unknown accelerator 'tpu', expected one of cuda, tensorrt"),
        ({"name": "dnnl"}, "cpu", "unknown accelerator 'dnnl', expected one of openvino"),
        (
            {"name": "tensorrt", "parameters": {"precision_mode": "FP8"}},
            "gpu",
            "precision_mode must be FP32, FP16 or INT8, got 'FP8'",
        ),
        (
            {"name": "tensorrt", "parameters": {"workspace": "1"}},
            "gpu",
            "unknown tensorrt parameter 'workspace'",
        ),
    ],
)
def test_bad_accelerators_are_load_errors(
    accelerator: dict[str, Any], kind: str, message: str
) -> None:
    model = config(**{kind: [accelerator]})
    # on an instance of either kind: a typo shows on the CPU machine, not first on the GPU box
    for instance in (GPU, CPU):
        with pytest.raises(ConfigError, match=message):
            session_providers(model, instance, GPU_BUILD)


def test_fallback_parameter_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match=f"{FALLBACK_PARAMETER} must be true or false"):
        session_providers(config(**{FALLBACK_PARAMETER: "maybe"}), CPU, CPU_BUILD)


def test_a_real_session_gets_the_providers(tmp_path: Path) -> None:
    path = modelgen.add_sub(tmp_path)
    base = modelgen.model_config(path, max_batch_size=8)
    plain = config_from_dict(base, "add_sub", "add_sub")
    backend = OnnxRuntimeBackend(path, plain, CPU)
    assert backend._session.get_providers() == ["CPUExecutionProvider"]
    if "OpenVINOExecutionProvider" not in ort.get_available_providers():
        accelerated = plain.model_copy(
            update={"optimization": config(cpu=[{"name": "openvino"}]).optimization}
        )
        with pytest.raises(ConfigError, match="OpenVINOExecutionProvider"):
            OnnxRuntimeBackend(path, accelerated, CPU)


@pytest.mark.skipif(
    "CUDAExecutionProvider" not in ort.get_available_providers(),
    reason="this onnxruntime has no CUDAExecutionProvider (the device check runs this)",
)
@pytest.mark.parametrize("accelerator", [None, "tensorrt"])
def test_a_gpu_instance_runs_on_the_gpu(accelerator: str | None, tmp_path: Path) -> None:
    """Where onnxruntime-gpu and a GPU exist (scripts/device_check.sh): CUDA, or TensorRT in
    FP16 before it, answers as the CPU provider does."""
    available = ort.get_available_providers()
    if accelerator == "tensorrt" and "TensorrtExecutionProvider" not in available:
        pytest.skip("this onnxruntime has no TensorrtExecutionProvider")
    path = modelgen.small_cnn(tmp_path)
    served = config_from_dict(modelgen.model_config(path, max_batch_size=8), "cnn", "cnn")
    if accelerator:
        wanted = config(gpu=[{"name": accelerator, "parameters": {"precision_mode": "FP16"}}])
        served = served.model_copy(update={"optimization": wanted.optimization})
    backend = OnnxRuntimeBackend(path, served, InstanceSpec("KIND_GPU", device_id=0))
    started = backend._session.get_providers()
    assert started[0] == ("TensorrtExecutionProvider" if accelerator else "CUDAExecutionProvider")
    assert not backend.runs_inline
    image = np.random.default_rng(0).random((2, 3, 224, 224), dtype=np.float32)
    cpu = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = cpu.run(None, {"image": image})[0]
    got = backend.execute({"image": image}, ["logits"])["logits"]
    np.testing.assert_allclose(got, expected, atol=1e-2 if accelerator else 1e-3)


def test_grpc_model_config_carries_the_accelerators_to_tritonclient() -> None:
    service_pb2 = pytest.importorskip("tritonclient.grpc.service_pb2")
    parsed = config_from_dict(parse_pbtxt(TRITON_EXAMPLE, "m/config.pbtxt"), "m", "m/config.pbtxt")
    wire = encode_model_config(parsed.to_triton_dict()).SerializeToString()
    theirs = service_pb2.ModelConfigResponse.FromString(wire).config.optimization
    trt = theirs.execution_accelerators.gpu_execution_accelerator[0]
    assert trt.name == "tensorrt" and trt.parameters["precision_mode"] == "FP16"
    assert theirs.execution_accelerators.cpu_execution_accelerator[0].name == "openvino"
