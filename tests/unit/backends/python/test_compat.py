"""A Triton model.py that uses what inferplex lacks is found when it loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplex.backends.python.compat import check, unsupported_uses


def test_unsupported_names_of_the_module_are_found_with_their_lines() -> None:
    source = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        pb_utils.load_model(model_name="x")
        pb_utils.get_input_tensor_by_name(requests[0], "A")  # supported
        return pb_utils.no_such_function()
"""
    found = unsupported_uses(source)
    assert len(found) == 2
    assert found[0].startswith("pb_utils.load_model (line 6): the model loading API")
    assert found[1] == "pb_utils.no_such_function (line 8): Triton's module has no such name"


def test_every_import_form_is_followed() -> None:
    assert unsupported_uses(
        "import triton_python_backend_utils\ntriton_python_backend_utils.load_model"
    )
    assert unsupported_uses("from inferplex.handler import triton as pb\npb.unload_model")
    assert unsupported_uses("import inferplex.handler.triton as t\nt.is_model_ready")
    # another module's attribute of the same name is not Triton's
    assert unsupported_uses("import os\nos.load_model") == []


def test_request_methods_inferplex_lacks_are_found() -> None:
    source = """def execute(self, requests):
    requests[0].set_release_flags(2)
    if requests[0].flags() & 1 or requests[0].trace():
        x = requests[0].as_numpy().flags.writeable  # numpy's flags: not a call
"""
    found = unsupported_uses(source)
    assert sorted(f.split(":")[0] for f in found) == [  # flags() is served: sequences
        "request.set_release_flags() (line 2)",
        "request.trace() (line 3)",
    ]
    assert any("request rescheduling" in f for f in found)


def test_keywords_inferplex_does_not_take_are_found() -> None:
    source = """
import triton_python_backend_utils as pb_utils
pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[],
                          preferred_memory=None, correlation_id=3)
pb_utils.InferenceResponse([], parameters={"a": 1})
pb_utils.InferenceRequest(model_name="m", request_id="7", timeout=5)  # all taken
"""
    found = unsupported_uses(source)
    assert [f.split(":")[0] for f in found] == [
        "pb_utils.InferenceRequest(preferred_memory=...) (line 3)",
        "pb_utils.InferenceRequest(correlation_id=...) (line 3)",
        "pb_utils.InferenceResponse(parameters=...) (line 5)",
    ]
    assert "sequence batching" in found[1]


def test_calling_a_decoupled_model_is_supported() -> None:
    source = "r.exec(decoupled=True)\nr.async_exec(decoupled=True)\nr.set_release_flags(1)\n"
    (found,) = unsupported_uses(source)  # the other refusals stay
    assert found.startswith("request.set_release_flags() (line 3)")


def test_a_model_class_with_is_ready_fails(tmp_path: Path) -> None:
    class TritonPythonModel:
        def is_ready(self) -> bool:
            return True

        def execute(self, requests: list[object]) -> list[object]:
            return []

    path = tmp_path / "model.py"
    path.write_text("")
    with pytest.raises(ImportError, match=r"TritonPythonModel\.is_ready: the model's own"):
        check(path, TritonPythonModel)
    check(path, object)  # not a Triton-style class: nothing to say


def test_tritons_keyword_names_are_taken() -> None:
    source = """
import triton_python_backend_utils as pb_utils
pb_utils.get_input_tensor_by_name(inference_request=r, name="A")
pb_utils.get_output_tensor_by_name(inference_response=r, name="A")
pb_utils.get_output_config_by_name(model_config={}, name="A")
pb_utils.triton_string_to_numpy(triton_type_string="TYPE_FP32")
pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message="m", code=1))
pb_utils.MetricFamily(name="n", description="d", kind=pb_utils.MetricFamily.GAUGE)
pb_utils.Logger.log(message="m", level=pb_utils.Logger.INFO)
"""
    assert unsupported_uses(source) == []
