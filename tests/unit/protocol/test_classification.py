"""Triton's classification extension: the top N classes of an output as
"<value>:<index>[:<label>]" strings, as Triton writes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inferplex.dataplane.classification import class_count, classify, read_labels
from inferplex.errors import ConfigError, InvalidInputError
from inferplex.types import Tensor


def tensor(data: np.ndarray, datatype: str = "FP32") -> Tensor:
    return Tensor("OUT", datatype, data.shape, data)


def test_the_example_of_tritons_document() -> None:
    # extension_classification.md: output [1.1, 3.3, 0.5, 2.4], classification 2
    out = classify(tensor(np.array([1.1, 3.3, 0.5, 2.4], np.float32)), 2, batched=False)
    assert (out.datatype, out.shape) == ("BYTES", (2,))
    assert out.data.tolist() == [b"3.300000:1", b"2.400000:3"]
    labels = ["", "index_1_label", "", "index_3_label"]
    out = classify(tensor(np.array([1.1, 3.3, 0.5, 2.4], np.float32)), 2, False, labels)
    assert out.data.tolist() == [b"3.300000:1:index_1_label", b"2.400000:3:index_3_label"]


def test_each_batch_row_is_classified_on_its_own() -> None:
    data = np.array([[[1, 5], [10, 4]], [[0, 0], [9, -3]]], np.int32)  # rows of 2 x 2
    out = classify(tensor(data, "INT32"), 3, batched=True)
    assert out.shape == (2, 3)
    assert out.data.tolist() == [[b"10:2", b"5:1", b"4:3"], [b"9:2", b"0:0", b"0:1"]]


def test_more_classes_than_there_are_gives_them_all() -> None:
    out = classify(tensor(np.array([2, 7], np.uint8), "UINT8"), 5, batched=False)
    assert out.shape == (2,) and out.data.tolist() == [b"7:1", b"2:0"]
    empty = classify(tensor(np.zeros((3, 0), np.float64), "FP64"), 2, batched=True)
    assert empty.shape == (3, 0)


@pytest.mark.parametrize("datatype", ["BOOL", "FP16", "BYTES"])
def test_only_numeric_outputs_are_classified(datatype: str) -> None:
    with pytest.raises(InvalidInputError, match="OUT.*needs a numeric output, not " + datatype):
        classify(tensor(np.zeros(2), datatype), 1, batched=False)


@pytest.mark.parametrize("value", [-1, 1.5, "2", True, None])
def test_a_count_is_a_non_negative_integer(value: object) -> None:
    if value is None:
        assert class_count("OUT", {}) == 0
        return
    with pytest.raises(InvalidInputError, match="'classification' must be a non-negative"):
        class_count("OUT", {"classification": value})


def test_labels_are_the_lines_of_the_file(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("cat\r\ndog\n\nemu")
    assert read_labels(tmp_path, "labels.txt") == ("cat", "dog", "", "emu")


def test_a_label_file_linked_from_outside_the_model_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0")
    model = tmp_path / "model"
    model.mkdir()
    (model / "labels.txt").symlink_to(secret)
    with pytest.raises(ConfigError, match=r"label_filename 'labels\.txt' must stay inside"):
        read_labels(model, "labels.txt")
