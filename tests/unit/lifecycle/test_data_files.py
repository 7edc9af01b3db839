"""Initial states read from a sequence model's initial_state/ folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inferplex.config.model_config import ModelConfig
from inferplex.errors import ConfigError
from inferplex.lifecycle.data_files import initial_states


def _config(
    dims: list[int], data_file: str = "seed.bin", data_type: str = "TYPE_FP32"
) -> ModelConfig:
    state = {
        "input_name": "S_IN",
        "output_name": "S_OUT",
        "data_type": data_type,
        "dims": dims,
        "initial_state": [{"name": "seed", "data_type": data_type, "data_file": data_file}],
    }
    return ModelConfig(name="m", max_batch_size=4, sequence_batching={"state": [state]})


def _folder(tmp_path: Path, data: bytes) -> Path:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "seed.bin").write_bytes(data)
    return tmp_path


def test_the_file_holds_the_state_in_its_dims(tmp_path: Path) -> None:
    model = _folder(tmp_path, np.array([1.5, -2, 3, 4], dtype="<f4").tobytes())
    states = initial_states(_config([2, 2]), model)
    assert states["S_IN"].tolist() == [[1.5, -2.0], [3.0, 4.0]]
    assert states["S_IN"].dtype == np.float32


def test_strings_are_length_prefixed(tmp_path: Path) -> None:
    model = _folder(tmp_path, b"\x02\x00\x00\x00hi\x00\x00\x00\x00")
    states = initial_states(_config([2], data_type="TYPE_STRING"), model)
    assert states["S_IN"].tolist() == [b"hi", b""]


@pytest.mark.parametrize(
    ("dims", "data_file", "message"),
    [
        ([3], "seed.bin", "has 8 bytes, expected 12 for FP32 \\[3\\]"),
        ([2], "none.bin", "cannot read .*/initial_state/none.bin"),
        ([-1], "seed.bin", "dims \\[-1\\] are variable"),
    ],
)
def test_a_file_that_does_not_fit_fails_the_load_naming_the_state(
    tmp_path: Path, dims: list[int], data_file: str, message: str
) -> None:
    model = _folder(tmp_path, np.zeros(2, dtype="<f4").tobytes())
    with pytest.raises(ConfigError, match=f"sequence_batching.state 'S_IN': data_file.*{message}"):
        initial_states(_config(dims, data_file), model)
