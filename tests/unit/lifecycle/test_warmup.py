"""model_warmup: read from both config formats, rendered back, turned into requests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inferplex.config.model_config import ModelConfig
from inferplex.config.readers import read_model_config
from inferplex.datatypes import serialize_bytes
from inferplex.errors import ConfigError
from inferplex.lifecycle.warmup import warmup_requests

PBTXT = """
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] },
        { name: "s" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
model_warmup [
  {
    name: "sample"
    batch_size: 2
    count: 2
    inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 3 ] input_data_file: "x.bin" } }
    inputs { key: "s" value: { data_type: TYPE_STRING dims: [ 2 ] zero_data: true } }
  },
  {
    batch_size: 1
    inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 3 ] random_data: true } }
    inputs { key: "s" value: { data_type: TYPE_STRING dims: [ 2 ] input_data_file: "s.bin" } }
  }
]
"""

YAML = """
max_batch_size: 4
input: [{name: x, data_type: FP32, dims: [3]}, {name: s, data_type: BYTES, dims: [2]}]
output: [{name: y, data_type: FP32, dims: [3]}]
model_warmup:
  - name: sample
    batch_size: 2
    count: 2
    inputs:
      x: {data_type: TYPE_FP32, dims: [3], input_data_file: x.bin}
      s: {data_type: TYPE_STRING, dims: [2], zero_data: true}
  - batch_size: 1
    inputs:
      x: {data_type: TYPE_FP32, dims: [3], random_data: true}
      s: {data_type: TYPE_STRING, dims: [2], input_data_file: s.bin}
"""


def model_dir(tmp_path: Path, filename: str, text: str) -> Path:
    folder = tmp_path / "m"
    (folder / "warmup").mkdir(parents=True)
    (folder / filename).write_text(text)
    (folder / "warmup" / "x.bin").write_bytes(np.arange(6, dtype="<f4").tobytes())
    strings = np.array([b"ab", b"c"], dtype=object)
    (folder / "warmup" / "s.bin").write_bytes(serialize_bytes(strings))
    return folder


def read(folder: Path) -> ModelConfig:
    config = read_model_config(folder)
    assert config is not None
    return config


@pytest.mark.parametrize(("filename", "text"), [("config.pbtxt", PBTXT), ("config.yaml", YAML)])
def test_both_formats_read_the_same_warmup(tmp_path: Path, filename: str, text: str) -> None:
    folder = model_dir(tmp_path, filename, text)
    config = read(folder)
    assert not config.unsupported_fields
    first, second = config.model_warmup
    assert second.name == "" and second.batch_size == 1
    assert first.name == "sample" and first.count == 2 and first.inputs["x"].input_data_file
    rendered = config.to_triton_dict()["model_warmup"]
    assert rendered[0]["inputs"]["s"] == {
        "data_type": "TYPE_STRING",
        "dims": [2],
        "zero_data": True,
    }
    requests = warmup_requests(config, folder)
    assert len(requests) == 3  # count 2, then count 0 = once
    x, s = requests[0].inputs
    np.testing.assert_array_equal(x.data, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert s.data.shape == (2, 2) and s.data.tolist() == [[b"", b""], [b"", b""]]
    x, s = requests[2].inputs
    assert x.data.shape == (1, 3) and x.data.dtype == np.float32
    assert s.data.tolist() == [[b"ab", b"c"]]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("batch_size: 1\n", "has batch_size 0, expected 1 to max_batch_size 4"),
        ('input_data_file: "../escape"', "must stay inside the model's warmup/ folder"),
        ('input_data_file: "/etc/passwd"', "must be relative to the model's warmup/ folder"),
        ('input_data_file: "missing.bin"', "cannot read m/warmup/missing.bin"),
        ('input_data_file: "s.bin"', "file s.bin has"),
    ],
)
def test_bad_samples_name_what_is_wrong(tmp_path: Path, change: str, message: str) -> None:
    text = PBTXT.split("model_warmup")[0] + (
        'model_warmup [ { name: "w" batch_size: 2 inputs { key: "x" value: '
        '{ data_type: TYPE_FP32 dims: [ 3 ] input_data_file: "x.bin" } } } ]'
    )
    if change.startswith("batch_size"):
        text = text.replace("batch_size: 2", "batch_size: 0")
    else:
        text = text.replace('input_data_file: "x.bin"', change)
    folder = model_dir(tmp_path, "config.pbtxt", text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        warmup_requests(read(folder), folder)


def test_a_warmup_input_needs_exactly_one_data_source(tmp_path: Path) -> None:
    text = PBTXT.split("model_warmup")[0] + (
        'model_warmup [ { inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 3 ] '
        "zero_data: true random_data: true } } } ]"
    )
    with pytest.raises(ConfigError, match="exactly one of zero_data, random_data"):
        read(model_dir(tmp_path, "config.pbtxt", text))
