"""Running handlers of both styles in-process: what they receive and what may be returned."""

from __future__ import annotations

import json
import types
from typing import Any

import numpy as np
import pytest

from inferplex.backends.python.runner import HandlerError, find_class
from inferplex.backends.python.styles import make_runner
from inferplex.backends.worker.messages import Failure, RequestFailed, RequestInfo
from inferplex.errors import ErrorCode, InferplexError
from inferplex.handler import BaseHandler, Context
from inferplex.handler import triton as pb_utils


def context(
    max_batch_size: int = 8,
    inputs: tuple[tuple[str, str, list[int]], ...] = (("INPUT0", "TYPE_FP32", [4]),),
    outputs: tuple[tuple[str, str, list[int]], ...] = (("OUTPUT0", "TYPE_FP32", [4]),),
) -> Context:
    config = {
        "name": "m",
        "max_batch_size": max_batch_size,
        "input": [{"name": n, "data_type": t, "dims": d} for n, t, d in inputs],
        "output": [{"name": n, "data_type": t, "dims": d} for n, t, d in outputs],
    }
    return Context("m", "1", "/models/m/1", config, "m_0")


def infos(*requests: tuple[str, dict[str, Any], int]) -> list[RequestInfo]:
    """The requests of a batch as the worker gets them, from (id, parameters, rows)."""
    return [RequestInfo(n, *request) for n, request in enumerate(requests)]


class Doubler(BaseHandler):
    def inference(self, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"OUTPUT0": data["INPUT0"] * 2}


def test_base_handler_gets_stacked_batches_and_outputs_are_cast() -> None:
    runner = make_runner(Doubler(), context())
    batch = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = runner.run({"INPUT0": batch}, ["OUTPUT0"])["OUTPUT0"]
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, batch * 2)


def test_initialize_gets_the_context() -> None:
    handler = Doubler()
    make_runner(handler, context())
    assert handler.initialized and handler.context is not None
    assert handler.context.system_properties["model_dir"] == "/models/m/1"
    assert handler.context.input_names == ["INPUT0"]


class TorchServeStyle(BaseHandler):
    """Written as for TorchServe: rows in, one JSON-able item per row out."""

    def preprocess(self, data: list[dict[str, Any]]) -> list[bytes]:
        return [row.get("data") or row.get("body") for row in data]

    def inference(self, data: list[bytes]) -> list[int]:
        return [len(item) for item in data]

    def postprocess(self, data: list[int]) -> list[dict[str, Any]]:
        return [{"length": np.int64(n), "bits": np.zeros(2, np.uint8)} for n in data]


def test_torchserve_rows_carry_the_raw_bytes_and_items_become_json() -> None:
    ctx = context(inputs=(("RAW", "TYPE_STRING", [1]),), outputs=(("JSON", "TYPE_STRING", [1]),))
    runner = make_runner(TorchServeStyle(), ctx)
    raw = np.array([[b"abc"], [b"\x00" * 10]], dtype=object)
    out = runner.run({"RAW": raw}, ["JSON"])["JSON"]
    assert out.shape == (2, 1)
    decoded = [json.loads(x) for x in out[:, 0]]
    assert decoded == [{"length": 3, "bits": [0, 0]}, {"length": 10, "bits": [0, 0]}]


def test_per_row_scalars_fill_dims_one() -> None:
    class Sum(BaseHandler):
        def handle(self, data: list[dict[str, Any]], context: Context) -> list[float]:
            return [float(row["INPUT0"].sum()) for row in data]

    ctx = context(outputs=(("SUM", "TYPE_FP64", [1]),))
    out = make_runner(Sum(), ctx).run({"INPUT0": np.ones((3, 4), np.float32)}, ["SUM"])["SUM"]
    assert out.shape == (3, 1) and out.dtype == np.float64
    np.testing.assert_array_equal(out, 4.0)


def test_unbatched_models_get_one_item_with_the_whole_request() -> None:
    class Whole(BaseHandler):
        def inference(self, data: dict[str, np.ndarray]) -> np.ndarray:
            return data["INPUT0"][::-1]

    runner = make_runner(Whole(), context(max_batch_size=0))
    out = runner.run({"INPUT0": np.arange(4, dtype=np.float32)}, ["OUTPUT0"])["OUTPUT0"]
    np.testing.assert_array_equal(out, [3, 2, 1, 0])


def test_a_list_of_the_wrong_length_is_refused() -> None:
    class Short(BaseHandler):
        def handle(self, data: list[dict[str, Any]], context: Context) -> list[int]:
            return [1]

    with pytest.raises(HandlerError, match="list of 1 items for 2"):
        make_runner(Short(), context()).run({"INPUT0": np.ones((2, 4), np.float32)}, ["OUTPUT0"])


def test_a_missing_output_is_named() -> None:
    class Wrong(BaseHandler):
        def inference(self, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {"OUTPUT0": data["INPUT0"]}

    ctx = context(outputs=(("OUTPUT0", "TYPE_FP32", [4]), ("OUTPUT1", "TYPE_FP32", [4])))
    with pytest.raises(HandlerError, match="no output 'OUTPUT1'"):
        make_runner(Wrong(), ctx).run({"INPUT0": np.ones((1, 4), np.float32)}, ["OUTPUT1"])


class TritonStyle:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        out = pb_utils.get_output_config_by_name(config, "OUTPUT0")
        self.dtype = pb_utils.triton_string_to_numpy(out["data_type"])
        self.args = args

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            assert x is not None
            if x.as_numpy().sum() < 0:
                error = pb_utils.TritonError("negative input")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            y = (x.as_numpy() + 1).astype(self.dtype)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return responses


def test_triton_style_models_run_and_get_tritons_args() -> None:
    handler = TritonStyle()
    runner = make_runner(handler, context())
    assert handler.args["model_name"] == "m" and handler.args["model_version"] == "1"
    assert handler.dtype is np.float32
    out = runner.run({"INPUT0": np.zeros((2, 4), np.float32)}, ["OUTPUT0"])["OUTPUT0"]
    np.testing.assert_array_equal(out, np.ones((2, 4)))


def test_an_error_response_fails_the_batch_with_its_message_and_code() -> None:
    with pytest.raises(InferplexError, match=r"^negative input$") as failed:
        make_runner(TritonStyle(), context()).run(
            {"INPUT0": -np.ones((1, 4), np.float32)}, ["OUTPUT0"]
        )
    assert failed.value.code is ErrorCode.INTERNAL  # Triton's default code

    class Refusing:
        def execute(self, requests: list[Any]) -> list[Any]:
            error = pb_utils.TritonError("bad X", pb_utils.TritonError.INVALID_ARG)
            return [pb_utils.InferenceResponse(error=error) for _ in requests]

    with pytest.raises(InferplexError, match="bad X") as failed:
        make_runner(Refusing(), context()).run({"INPUT0": np.ones((1, 4), np.float32)}, ["OUTPUT0"])
    assert failed.value.code is ErrorCode.INVALID_ARGUMENT


def test_triton_error_codes_and_the_servers_code_names() -> None:
    assert pb_utils.TritonError("x").code() == pb_utils.TritonError.INTERNAL
    assert pb_utils.TritonError("x", "not_found").code() == pb_utils.TritonError.NOT_FOUND
    unavailable = pb_utils.TritonError("x", pb_utils.TritonError.UNAVAILABLE)
    assert unavailable.server_code() is ErrorCode.UNAVAILABLE


def test_dlpack_capsules_and_objects_both_make_tensors() -> None:
    torch = pytest.importorskip("torch")
    source = torch.arange(6, dtype=torch.float32)
    from_capsule = pb_utils.Tensor.from_dlpack("a", torch.utils.dlpack.to_dlpack(source))
    np.testing.assert_array_equal(from_capsule.as_numpy(), np.arange(6))
    again = pb_utils.Tensor.from_dlpack("b", from_capsule.to_dlpack())
    np.testing.assert_array_equal(again.as_numpy(), np.arange(6))
    readonly = np.arange(3.0)
    readonly.flags.writeable = False  # as a request's inputs are
    back = torch.utils.dlpack.from_dlpack(pb_utils.Tensor("r", readonly).to_dlpack())
    assert back.tolist() == [0.0, 1.0, 2.0]
    np.testing.assert_array_equal(pb_utils.Tensor.from_dlpack("c", source).as_numpy(), np.arange(6))


def test_exec_outside_a_served_model_answers_error_responses() -> None:
    request = pb_utils.InferenceRequest("other", [], ["Y"])
    assert request.exec(decoupled=False).has_error()  # no server here: an error response
    (response,) = request.exec(decoupled=True)  # one response, the final one: an error
    error = response.error()
    assert error is not None and "python backend" in error.message()


def test_per_row_lists_of_numbers_stack_into_a_numeric_output() -> None:
    class Lists(BaseHandler):
        def inference(self, data: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [{"OUTPUT0": (row["INPUT0"] * 2).tolist()} for row in data]

        def preprocess(self, data: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return data

    batch = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = make_runner(Lists(), context()).run({"INPUT0": batch}, ["OUTPUT0"])["OUTPUT0"]
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, batch * 2)


def test_a_module_level_handle_function_is_a_handler() -> None:
    module = types.ModuleType("module_entry")
    calls: list[Any] = []

    def handle(data: Any, ctx: Any) -> Any:
        calls.append(data)
        return None if data is None else [len(row["data"]) for row in data]

    handle.__module__ = module.__name__
    module.handle = handle
    ctx = context(inputs=(("INPUT0", "TYPE_STRING", [1]),), outputs=(("N", "TYPE_INT64", [1]),))
    runner = make_runner(find_class(module, "")(), ctx)
    assert calls == [None]  # initialized as TorchServe does: handle(None, context)
    text = np.array([[b"ab"], [b"abcd"]], dtype=object)
    assert runner.run({"INPUT0": text}, ["N"])["N"].tolist() == [[2], [4]]


def test_bls_outside_a_served_model_says_so() -> None:
    request = pb_utils.InferenceRequest("other", [pb_utils.Tensor("X", np.ones(1))], ["Y"])
    response = request.exec()
    assert response.has_error()
    error = response.error()
    assert error is not None and "python backend" in error.message()


def test_find_class_rules() -> None:
    module = types.ModuleType("user_model")

    class MyHandler(BaseHandler):
        pass

    class Helper:
        pass

    for cls in (MyHandler, Helper):
        cls.__module__ = module.__name__
        setattr(module, cls.__name__, cls)
    module.BaseHandler = BaseHandler  # imported names do not count
    assert find_class(module, "") is MyHandler  # the one class with handle
    assert find_class(module, "Helper") is Helper
    with pytest.raises(HandlerError, match="no class 'Nope'"):
        find_class(module, "Nope")
    module.Handler = Helper
    assert find_class(module, "") is Helper
    module.TritonPythonModel = BaseHandler
    assert find_class(module, "") is BaseHandler
    del module.Handler, module.TritonPythonModel
    module.Other = type("Other", (BaseHandler,), {"__module__": module.__name__})
    with pytest.raises(HandlerError, match="found: MyHandler, Other"):
        find_class(module, "")


def test_default_preprocess_with_a_per_row_postprocess() -> None:
    class Labels(BaseHandler):
        def inference(self, data: dict[str, np.ndarray]) -> np.ndarray:
            return data["INPUT0"].argmax(axis=1)

        def postprocess(self, data: np.ndarray) -> list[str]:
            return [f"class {i}" for i in data]

    ctx = context(outputs=(("LABEL", "TYPE_STRING", [1]),))
    batch = np.eye(4, dtype=np.float32)[[2, 0, 3]]
    out = make_runner(Labels(), ctx).run({"INPUT0": batch}, ["LABEL"])["LABEL"]
    assert out.tolist() == [[b"class 2"], [b"class 0"], [b"class 3"]]


class PerRequest:
    """Answers each request with its rows times its 'scale' parameter and its id's length;
    a request whose parameters say 'fail' gets an error response."""

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters())
            if parameters.get("fail"):
                error = pb_utils.TritonError(f"{request.request_id()} failed", "invalid_argument")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            y = x * parameters.get("scale", 1) + len(request.request_id())
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return responses


def test_triton_models_get_one_request_per_client_request() -> None:
    runner = make_runner(PerRequest(), context())
    batch = np.ones((4, 4), np.float32)
    requests = infos(("a", {"scale": 10}, 2), ("bb", {"fail": True}, 1), ("ccc", {}, 1))
    result = runner.run_requests({"INPUT0": batch}, ["OUTPUT0"], requests)
    assert result.failed == [RequestFailed(1, Failure(ErrorCode.INVALID_ARGUMENT, "bb failed"))]
    # the rows of the requests that were answered, in order: a's two, then c's
    assert result.outputs["OUTPUT0"][:, 0].tolist() == [11.0, 11.0, 4.0]
    only = infos(("x", {"fail": True}, 1))
    result = runner.run_requests({"INPUT0": batch[:1]}, ["OUTPUT0"], only)
    assert result.outputs == {} and len(result.failed) == 1


def test_torchserve_handlers_read_each_rows_request_id() -> None:
    seen: list[Any] = []

    class Ids(BaseHandler):
        def inference(self, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            rows = len(data["INPUT0"])
            seen.extend(self.context.get_request_id(i) for i in range(rows))
            return {"OUTPUT0": data["INPUT0"]}

    runner = make_runner(Ids(), context())
    runner.run_requests(
        {"INPUT0": np.zeros((3, 4), np.float32)}, ["OUTPUT0"], infos(("a", {}, 2), ("b", {}, 1))
    )
    assert seen == ["a", "a", "b"]


def test_an_empty_array_of_any_type_is_an_empty_text_output() -> None:
    """Triton's mock_llm (qa/python_models/generate_models) answers OUTPUT_0_DIM with
    ``pb_utils.Tensor("TEXT", np.array([]))``, float64, for its TYPE_STRING output: an empty
    output, not the text "[]"."""

    class Empty:
        def execute(self, requests: list[Any]) -> list[Any]:
            empty = pb_utils.Tensor("OUTPUT0", np.array([]))
            return [pb_utils.InferenceResponse([empty]) for _ in requests]

    text = context(max_batch_size=0, outputs=(("OUTPUT0", "TYPE_STRING", [-1]),))
    out = make_runner(Empty(), text).run({"INPUT0": np.ones(4, np.float32)}, ["OUTPUT0"])["OUTPUT0"]
    assert out.shape == (0,) and out.dtype == np.object_
