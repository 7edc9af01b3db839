"""What decoding a request allocates is charged to the server-wide byte budget before it is
allocated (security/charges.py), through the codecs."""

from __future__ import annotations

import contextvars

import numpy as np
import orjson
import pytest

from inferplex.errors import InsufficientMemoryError, PayloadTooLargeError
from inferplex.protocol.v2 import generated as pb
from inferplex.protocol.v2.grpc_codec import decode_infer_request_bytes
from inferplex.protocol.v2.rest import decode_infer_request
from inferplex.security.charges import BYTES_ELEMENT_COST, Charge, charging
from inferplex.transport.http_limits import ByteBudget


def _charged(budget: ByteBudget, decode: object, charge: Charge | None = None) -> Charge:
    """Run ``decode()`` with ``charge`` (a new one) on ``budget`` (in its own context, as a
    worker thread decodes); the charge, still held."""
    charge = charge or Charge(budget)

    def run() -> None:
        charging(charge)
        decode()  # type: ignore[operator]

    contextvars.copy_context().run(run)
    return charge


def _bytes_body(count: int) -> tuple[bytes, int]:
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "BYTES",
                    "shape": [count],
                    "parameters": {"binary_data_size": 4 * count},
                }
            ]
        }
    )
    return header + b"\0\0\0\0" * count, len(header)


def test_a_bytes_bomb_is_refused_before_its_elements_are_made() -> None:
    budget = ByteBudget(1 << 20)
    body, length = _bytes_body(100_000)  # 400 KB on the wire, 6.4 MB as objects
    charge = Charge(budget)
    with pytest.raises(PayloadTooLargeError, match=r"100000 BYTES elements.*MAX_BUFFERED_BYTES"):
        _charged(budget, lambda: decode_infer_request(body, length, "m"), charge)
    assert budget.used == charge.held == 16 * length  # the JSON header's objects only
    charge.release()  # (the frontend's, when the request ends)
    assert budget.used == 0


def test_a_charge_holds_until_released_and_a_full_budget_refuses_with_429() -> None:
    budget = ByteBudget(1 << 20)
    body, length = _bytes_body(1000)
    charge = _charged(budget, lambda: decode_infer_request(body, length, "m"))
    assert charge.held == budget.used >= 1000 * BYTES_ELEMENT_COST
    budget.used += (1 << 20) - charge.held  # the rest is held by other requests
    with pytest.raises(InsufficientMemoryError, match="retry later"):
        _charged(budget, lambda: decode_infer_request(body, length, "m"))
    budget.used -= (1 << 20) - charge.held
    charge.release()
    assert budget.used == 0 and charge.held == 0


def test_json_is_charged_for_its_objects_before_it_is_parsed() -> None:
    budget = ByteBudget(1 << 20)
    values = [0.5] * 50_000
    body = orjson.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [50_000]}]})
    body = body[:-3] + b',"data":' + orjson.dumps(values) + b"}]}"  # about 200 KB: 3.2 MB
    with pytest.raises(PayloadTooLargeError, match="JSON of"):
        _charged(budget, lambda: decode_infer_request(body, None, "m"))
    assert budget.used == 0


def test_grpc_typed_contents_are_charged_before_protobuf_parses_them() -> None:
    budget = ByteBudget(1 << 20)
    message = pb.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="x", datatype="BYTES", shape=[100_000])
    tensor.contents.bytes_contents.extend([b""] * 100_000)  # 200 KB on the wire
    data = message.SerializeToString()
    with pytest.raises(PayloadTooLargeError, match="request message"):
        _charged(budget, lambda: decode_infer_request_bytes(data))
    raw = pb.ModelInferRequest(model_name="m")
    raw.inputs.add(name="x", datatype="FP32", shape=[50_000])
    raw.raw_input_contents.append(np.zeros(50_000, np.float32).tobytes())
    data = raw.SerializeToString()
    charge = _charged(budget, lambda: decode_infer_request_bytes(data))
    # protobuf's copy and the raw entry's (its header is not typed contents)
    assert 2 * len(data) <= charge.held < 2 * len(data) + 1024


def test_an_uncharged_decode_costs_no_accounting() -> None:
    body, length = _bytes_body(100_000)
    request = decode_infer_request(body, length, "m")  # on the loop: small requests
    assert request.inputs[0].data.size == 100_000
