"""The generated models load in ONNX Runtime and compute what they promise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from examples import modelgen
from inferplex.config.writers import to_pbtxt, write_config
from inferplex.datatypes import V2_DATATYPES, V2_TO_NUMPY


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("repo")


@pytest.fixture(scope="module")
def digits(repo: Path) -> modelgen.TrainedModel:
    return modelgen.digits_mlp(repo)


@pytest.mark.parametrize("dtype", ["FP32", "INT32", "FP64"])
def test_add_sub_adds_and_subtracts(repo: Path, dtype: str) -> None:
    path = modelgen.add_sub(repo, name=f"add_sub_{dtype.lower()}", dtype=dtype, dims=4)
    assert path == repo / f"add_sub_{dtype.lower()}" / "1" / "model.onnx"
    a = np.arange(12).reshape(3, 4).astype(V2_TO_NUMPY[dtype])
    b = np.full((3, 4), 2).astype(V2_TO_NUMPY[dtype])
    total, difference = session(path).run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(difference, a - b)
    assert total.dtype == V2_TO_NUMPY[dtype]


def sample(datatype: str) -> np.ndarray:
    """A 2x3 batch of distinct values, including each type's extremes where it has them."""
    if datatype == "BYTES":
        # ONNX Runtime's Python binding takes string tensors as str, not bytes.
        return np.array([["", "a", "é"], ["xyz", "0", "b c"]], dtype=object)
    if datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    dtype = V2_TO_NUMPY[datatype]
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    return np.array([[info.min, info.max, 0], [1, 2, 3]], dtype=dtype)


@pytest.mark.parametrize("datatype", sorted(V2_DATATYPES))
def test_identity_round_trips_every_datatype(repo: Path, datatype: str) -> None:
    path = modelgen.identity(repo, datatype)
    assert path.parent.parent.name == f"identity_{datatype.lower()}"
    inputs, outputs = modelgen.signature(path)
    assert inputs == [modelgen.TensorSpec("INPUT0", datatype, (-1, -1))]
    assert outputs == [modelgen.TensorSpec("OUTPUT0", datatype, (-1, -1))]
    data = sample(datatype)
    (result,) = session(path).run(None, {"INPUT0": data})
    assert result.dtype == data.dtype
    np.testing.assert_array_equal(result, data)


def test_digits_mlp_is_accurate_and_matches_sklearn(digits: modelgen.TrainedModel) -> None:
    assert digits.sklearn_accuracy > 0.9
    assert digits.onnx_accuracy == digits.sklearn_accuracy
    inputs, outputs = modelgen.signature(digits.path)
    assert inputs == [modelgen.TensorSpec("pixels", "FP32", (-1, 64))]
    assert outputs == [
        modelgen.TensorSpec("probabilities", "FP32", (-1, 10)),
        modelgen.TensorSpec("label", "INT64", (-1,)),
    ]


def test_digits_mlp_classifies_raw_pixels(digits: modelgen.TrainedModel) -> None:
    from sklearn.datasets import load_digits

    features, labels = load_digits(return_X_y=True)
    probabilities, predicted = session(digits.path).run(
        None, {"pixels": features[:200].astype(np.float32)}
    )
    assert predicted.dtype == np.int64
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(predicted, probabilities.argmax(axis=1))
    # These samples are mostly in the training split, so the model knows them well.
    assert np.mean(predicted == labels[:200]) > 0.9


def test_small_cnn_is_deterministic(tmp_path: Path) -> None:
    first = modelgen.small_cnn(tmp_path / "a", image_size=32, widths=(4, 8))
    second = modelgen.small_cnn(tmp_path / "b", image_size=32, widths=(4, 8))
    assert first.read_bytes() == second.read_bytes()
    image = np.random.default_rng(1).random((2, 3, 32, 32), dtype=np.float32)
    (logits,) = session(first).run(None, {"image": image})
    assert logits.shape == (2, 10)
    assert np.all(np.isfinite(logits))
    assert not np.allclose(logits[0], logits[1]), "different images give different logits"


def test_small_cnn_default_size(repo: Path) -> None:
    inputs, outputs = modelgen.signature(modelgen.small_cnn(repo))
    assert inputs == [modelgen.TensorSpec("image", "FP32", (-1, 3, 224, 224))]
    assert outputs == [modelgen.TensorSpec("logits", "FP32", (-1, 10))]


def test_slow_returns_its_input(tmp_path: Path) -> None:
    path = modelgen.slow(tmp_path, seconds=0.01)
    data = np.array([1.5, -2.0, np.nan, np.inf, -0.0], dtype=np.float32)
    (result,) = session(path).run(None, {"INPUT0": data})
    np.testing.assert_array_equal(result, data)
    assert np.signbit(result[-1]), "the input passes through bit for bit"


def test_builders_overwrite_idempotently(tmp_path: Path) -> None:
    first = modelgen.add_sub(tmp_path).read_bytes()
    assert modelgen.add_sub(tmp_path).read_bytes() == first


def test_model_config_strips_the_batch_dimension(repo: Path) -> None:
    path = modelgen.add_sub(repo, dims=16)
    config = modelgen.model_config(
        path, max_batch_size=8, instance_kind="KIND_CPU", dynamic_batching=True
    )
    assert config == {
        "name": "add_sub",
        "platform": "onnxruntime_onnx",
        "max_batch_size": 8,
        "input": [
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]},
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [16]},
        ],
        "output": [
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]},
            {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [16]},
        ],
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
        "dynamic_batching": {},
    }
    unbatched = modelgen.model_config(path, name="other")
    assert unbatched["name"] == "other"
    assert unbatched["max_batch_size"] == 0
    assert unbatched["input"][0]["dims"] == [-1, 16]
    assert "instance_group" not in unbatched and "dynamic_batching" not in unbatched


def test_model_config_batches_only_a_variable_first_dimension(tmp_path: Path) -> None:
    path = modelgen.small_cnn(tmp_path, image_size=8, widths=(2,))
    assert modelgen.model_config(path, max_batch_size=4)["input"][0]["dims"] == [3, 8, 8]
    path = modelgen.identity(tmp_path, "FP32")
    assert modelgen.model_config(path, max_batch_size=4)["input"][0]["dims"] == [-1]

    fixed = tmp_path / "fixed" / "1" / "model.onnx"
    fixed.parent.mkdir(parents=True)
    value = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "fixed",
        [value],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])],
    )
    onnx.save(helper.make_model(graph), str(fixed))
    assert modelgen.model_config(fixed)["input"][0]["dims"] == [2, 3]
    with pytest.raises(ValueError, match="tensor 'X' has shape \\[2, 3\\]"):
        modelgen.model_config(fixed, max_batch_size=4)


def test_model_config_writes_one_value_per_item_as_triton_does(tmp_path: Path) -> None:
    path = modelgen.slow(tmp_path, seconds=0.01)
    config = modelgen.model_config(path, max_batch_size=8)
    assert config["input"] == [
        {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1], "reshape": {"shape": []}}
    ]
    assert "reshape {\n      shape: [ ]\n    }" in to_pbtxt(config)
    readers = pytest.importorskip("inferplex.config.readers")
    write_config(tmp_path / "slow", config)
    (tensor,) = readers.read_model_config(tmp_path / "slow").input
    assert (tensor.dims, tensor.reshape) == ((1,), ())
    assert modelgen.model_config(path)["input"][0] == {
        "name": "INPUT0",
        "data_type": "TYPE_FP32",
        "dims": [-1],
    }


def test_mlp_computes_relu_layers_with_seeded_weights(tmp_path: Path) -> None:
    path = modelgen.mlp(tmp_path, features=8, hidden=(16, 12), classes=3, seed=5)
    inputs, outputs = modelgen.signature(path)
    assert inputs == [modelgen.TensorSpec("features", "FP32", (-1, 8))]
    assert outputs == [modelgen.TensorSpec("logits", "FP32", (-1, 3))]
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    x = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    expected = x
    for i in range(3):
        expected = expected @ weights[f"fc{i}_w"] + weights[f"fc{i}_b"]
        if i < 2:
            expected = np.maximum(expected, 0)
    (logits,) = session(path).run(None, {"features": x})
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(logits[0], logits[1]), "different rows give different logits"


def test_mlp_is_deterministic_per_seed(tmp_path: Path) -> None:
    first = modelgen.mlp(tmp_path / "a", hidden=(32,)).read_bytes()
    assert modelgen.mlp(tmp_path / "b", hidden=(32,)).read_bytes() == first
    assert modelgen.mlp(tmp_path / "c", hidden=(32,), seed=1).read_bytes() != first
