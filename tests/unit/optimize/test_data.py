from pathlib import Path

import numpy as np
import onnx
import pytest

from examples import modelgen
from inferplex.errors import InvalidInputError
from inferplex_tools.optimize.data import (
    CalibrationReader,
    input_specs,
    load_npz,
    load_npz_dir,
    synthetic,
)


@pytest.fixture
def specs(tmp_path: Path) -> list:
    return input_specs(onnx.load(str(modelgen.add_sub(tmp_path, dims=4))))


def test_specs_read_the_signature(specs: list) -> None:
    assert [(s.name, s.dtype, s.shape, s.batchable) for s in specs] == [
        ("INPUT0", np.float32, (None, 4), True),
        ("INPUT1", np.float32, (None, 4), True),
    ]


def test_npz_files_are_concatenated_and_fed(tmp_path: Path, specs: list) -> None:
    rows = np.arange(12, dtype=np.float64).reshape(3, 4)
    np.savez(tmp_path / "a.npz", INPUT0=rows, INPUT1=rows, labels=[0, 1, 2])
    np.savez(tmp_path / "b.npz", INPUT0=rows[:1], INPUT1=rows[:1], labels=[3])
    data = load_npz_dir(tmp_path, specs, "evaluation set")
    assert data.rows == 4
    assert data.inputs["INPUT0"].dtype == np.float32
    assert data.labels is not None and data.labels.tolist() == [0, 1, 2, 3]
    assert [len(b["INPUT0"]) for b in data.batches(3)] == [3, 1]
    feed = data.feed(6)  # more rows than the set: repeated
    assert feed["INPUT1"][:, 0].tolist() == [0, 4, 8, 0, 0, 4]


def test_missing_input_names_what_is_expected(tmp_path: Path, specs: list) -> None:
    np.savez(tmp_path / "x.npz", INPUT0=np.zeros((2, 4)))
    with pytest.raises(InvalidInputError, match=r"no array for input\(s\) \['INPUT1'\]"):
        load_npz([tmp_path / "x.npz"], specs, "calibration set")


def test_unknown_array_and_bad_shape_are_errors(tmp_path: Path, specs: list) -> None:
    np.savez(tmp_path / "x.npz", INPUT0=np.zeros((2, 4)), INPUT1=np.zeros((2, 4)), other=[1])
    with pytest.raises(InvalidInputError, match=r"arrays \['other'\] match no model input"):
        load_npz([tmp_path / "x.npz"], specs, "evaluation set")
    np.savez(tmp_path / "y.npz", INPUT0=np.zeros((2, 5)), INPUT1=np.zeros((2, 4)))
    with pytest.raises(InvalidInputError, match=r"shape \[2, 5\]; the model expects \[N, 4\]"):
        load_npz([tmp_path / "y.npz"], specs, "evaluation set")
    np.savez(tmp_path / "z.npz", INPUT0=np.zeros((2, 4)), INPUT1=np.zeros((3, 4)))
    with pytest.raises(InvalidInputError, match="same, non-zero number of rows"):
        load_npz([tmp_path / "z.npz"], specs, "evaluation set")


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (np.arange(2).reshape(2, 1), r"shape \[2, 1\]; expected \[N\]"),
        (np.eye(2), r"shape \[2, 2\]; expected \[N\]"),
        (np.array([0.5, 1.0]), "not whole numbers"),
    ],
)
def test_labels_are_one_integer_class_per_row(
    tmp_path: Path, specs: list, labels: np.ndarray, message: str
) -> None:
    rows = np.zeros((2, 4))
    np.savez(tmp_path / "x.npz", INPUT0=rows, INPUT1=rows, labels=labels)
    with pytest.raises(InvalidInputError, match=message):
        load_npz([tmp_path / "x.npz"], specs, "evaluation set")
    np.savez(tmp_path / "y.npz", INPUT0=rows, INPUT1=rows, labels=np.array([1.0, 0.0]))
    loaded = load_npz([tmp_path / "y.npz"], specs, "evaluation set").labels
    assert loaded is not None and loaded.tolist() == [1, 0]  # whole floats are classes


def test_unreadable_file_and_empty_folder(tmp_path: Path, specs: list) -> None:
    (tmp_path / "bad.npz").write_text("not a zip")
    with pytest.raises(InvalidInputError, match=r"not a readable \.npz file"):
        load_npz([tmp_path / "bad.npz"], specs, "calibration set")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInputError, match=r"has no \.npz file"):
        load_npz_dir(tmp_path / "empty", specs, "calibration set")


def test_synthetic_data_only_for_float_inputs(tmp_path: Path, specs: list) -> None:
    data = synthetic(specs, 5)
    assert data.rows == 5 and data.labels is None
    ids = input_specs(onnx.load(str(modelgen.identity(tmp_path, "INT64"))))
    with pytest.raises(InvalidInputError, match=r"'INPUT0' .* cannot be made up"):
        synthetic(ids, 5)


def test_calibration_reader_rewinds(specs: list) -> None:
    reader = CalibrationReader(synthetic(specs, 5), batch_size=2)
    sizes = []
    while (batch := reader.get_next()) is not None:
        sizes.append(len(batch["INPUT0"]))
    assert sizes == [2, 2, 1]
    reader.rewind()
    assert reader.get_next() is not None


def test_whole_batches_for_a_fixed_batch_dimension(specs: list) -> None:
    data = synthetic(specs, 5)
    data = type(data)(data.inputs, np.arange(5), data.source)
    cut = data.whole_batches(2)
    assert cut.rows == 4 and cut.labels is not None and cut.labels.tolist() == [0, 1, 2, 3]
    assert data.whole_batches(8).rows == 8
