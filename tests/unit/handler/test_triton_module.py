"""``triton_python_backend_utils``: importable as Triton's module, with Triton's helpers."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import triton_python_backend_utils as pb_utils
from inferplex.handler import triton


def test_the_module_is_inferplexs_own() -> None:
    assert pb_utils is triton
    assert pb_utils.Tensor is triton.Tensor


def test_a_request_takes_the_model_name_as_bytes() -> None:
    """Triton's BLS example passes a BYTES input's element, ``as_numpy()[0]``."""
    name = np.array([b"add_sub"], dtype=np.object_)[0]
    assert pb_utils.InferenceRequest(model_name=name).model_name() == "add_sub"
    assert pb_utils.InferenceRequest(model_name="add_sub").model_name() == "add_sub"


def test_tensors_by_name() -> None:
    a, b = pb_utils.Tensor("A", np.ones(2)), pb_utils.Tensor("B", np.zeros(2))
    request = pb_utils.InferenceRequest(model_name="m", inputs=[a, b])
    assert pb_utils.get_input_tensor_by_name(request, "B") is b
    assert pb_utils.get_input_tensor_by_name(request, "C") is None
    response = pb_utils.InferenceResponse([a])
    assert pb_utils.get_output_tensor_by_name(response, "A") is a
    assert pb_utils.get_output_tensor_by_name(response, "B") is None


def test_config_helpers() -> None:
    config = {
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUT", "data_type": "TYPE_STRING", "dims": [1]}],
    }
    assert pb_utils.get_input_config_by_name(config, "IN")["dims"] == [4]
    assert pb_utils.get_output_config_by_name(config, "IN") is None
    assert not pb_utils.using_decoupled_model_transaction_policy(config)
    config["model_transaction_policy"] = {"decoupled": True}
    assert pb_utils.using_decoupled_model_transaction_policy(config)


def test_type_helpers_follow_tritons_numbers() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.TRITON_STRING_TO_NUMPY["TYPE_BOOL"] is bool
    with pytest.raises(pb_utils.TritonModelException, match="TYPE_NOPE"):
        pb_utils.triton_string_to_numpy("TYPE_NOPE")
    assert pb_utils.triton_to_numpy_type(11) is np.float32
    assert pb_utils.triton_to_numpy_type(13) is np.object_
    assert pb_utils.triton_to_numpy_type(99) is None
    assert pb_utils.numpy_to_triton_type(np.float32) == 11
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.bool_) == 1


def test_bytes_tensors_serialize_as_tritons_layout() -> None:
    array = np.array([b"ab", "c", 7], dtype=np.object_)
    encoded = pb_utils.serialize_byte_tensor(array)
    assert encoded == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c\x01\x00\x00\x007"
    assert pb_utils.deserialize_bytes_tensor(encoded).tolist() == [b"ab", b"c", b"7"]
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == ()
    assert pb_utils.serialize_byte_tensor(np.ones(2)) is None


def test_what_inferplex_lacks_is_named_with_the_reason() -> None:
    with pytest.raises(AttributeError, match="load_model is not supported by inferplex"):
        _ = pb_utils.load_model
    with pytest.raises(AttributeError, match="has no attribute 'no_such_thing'"):
        _ = pb_utils.no_such_thing


def test_logger_levels(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="inferplex.handler"):
        pb_utils.Logger.log_info("i")
        pb_utils.Logger.log_warn("w")
        pb_utils.Logger.log_error("e")
        pb_utils.Logger.log_verbose("v")
        pb_utils.Logger.log("x", pb_utils.Logger.WARNING)
        pb_utils.Logger.log("y")
    assert [(r.levelname, r.message) for r in caplog.records] == [
        ("INFO", "i"),
        ("WARNING", "w"),
        ("ERROR", "e"),
        ("DEBUG", "v"),
        ("WARNING", "x"),
        ("INFO", "y"),
    ]


def test_tensors_tell_tritons_datatype_number() -> None:
    assert pb_utils.Tensor("A", np.ones(2, np.float32)).triton_dtype() == 11
    assert pb_utils.Tensor("B", np.array([b"x"], dtype=np.object_)).triton_dtype() == 13
