"""Pre-encoded V2 inference requests and their response decoders, for the load generators.

Requests are encoded once, before the clock starts, so a benchmark's client only writes
bytes: HTTP/1.1 requests as complete byte strings (JSON or Triton's binary extension) and
gRPC ``ModelInferRequest`` messages already serialised. Decoders are used on samples only,
to check that the server answered correctly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import orjson

from inferplex.benchtool.clients import RequestFailed
from inferplex.datatypes import V2_TO_NUMPY, v2_datatype

Arrays = Mapping[str, np.ndarray]


#: the server answered, but not with a correct inference response
BadResponse = RequestFailed


def http_request(host: str, path: str, body: bytes, headers: Mapping[str, str]) -> bytes:
    """A complete keep-alive HTTP/1.1 POST request."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def http_json_request(host: str, model: str, inputs: Arrays, outputs: Sequence[str]) -> bytes:
    """An inference request with every tensor as a JSON list."""
    header = {
        "inputs": [
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": v2_datatype(array.dtype),
                "data": array.reshape(-1).tolist(),
            }
            for name, array in inputs.items()
        ],
        "outputs": [{"name": name} for name in outputs],
    }
    body = orjson.dumps(header)
    return http_request(
        host, f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"}
    )


def http_binary_request(host: str, model: str, inputs: Arrays, outputs: Sequence[str]) -> bytes:
    """An inference request in Triton's binary tensor extension, outputs asked in binary."""
    header = {
        "inputs": [
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": v2_datatype(array.dtype),
                "parameters": {"binary_data_size": array.nbytes},
            }
            for name, array in inputs.items()
        ],
        "outputs": [{"name": name, "parameters": {"binary_data": True}} for name in outputs],
    }
    json_header = orjson.dumps(header)
    body = json_header + b"".join(np.ascontiguousarray(a).tobytes() for a in inputs.values())
    return http_request(
        host,
        f"/v2/models/{model}/infer",
        body,
        {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(json_header)),
        },
    )


def header_value(head: bytes, name: bytes) -> bytes | None:
    """The value of a header in a raw HTTP response head (name in lower case)."""
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def decode_http_response(head: bytes, body: bytes) -> dict[str, np.ndarray]:
    """Outputs of a successful HTTP inference response, JSON or binary."""
    length = header_value(head, b"inference-header-content-length")
    header_size = int(length) if length is not None else len(body)
    header = orjson.loads(body[:header_size])
    offset = header_size
    outputs: dict[str, np.ndarray] = {}
    for output in header["outputs"]:
        dtype = V2_TO_NUMPY[output["datatype"]]
        size = output.get("parameters", {}).get("binary_data_size")
        if size is None:
            data = np.array(output["data"], dtype=dtype)
        else:
            data = np.frombuffer(body, dtype=dtype, count=size // dtype.itemsize, offset=offset)
            offset += size
        outputs[output["name"]] = data.reshape(output["shape"])
    return outputs


def grpc_request(model: str, inputs: Arrays, outputs: Sequence[str]) -> bytes:
    """A serialised ``inference.ModelInferRequest`` with raw input contents."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model)
    for name, array in inputs.items():
        request.inputs.add(name=name, datatype=v2_datatype(array.dtype), shape=array.shape)
        request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    for name in outputs:
        request.outputs.add(name=name)
    return request.SerializeToString()


def decode_grpc_response(message: bytes) -> dict[str, np.ndarray]:
    """Outputs of a serialised ``inference.ModelInferResponse`` (raw output contents)."""
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelInferResponse.FromString(message)
    if len(response.raw_output_contents) != len(response.outputs):
        raise BadResponse("gRPC response without raw_output_contents for every output")
    return {
        output.name: np.frombuffer(raw, dtype=V2_TO_NUMPY[output.datatype]).reshape(output.shape)
        for output, raw in zip(response.outputs, response.raw_output_contents, strict=True)
    }


def check_outputs(
    got: Mapping[str, np.ndarray], expected: Arrays, what: str, atol: float = 0.0
) -> None:
    """Raise BadResponse unless ``got`` holds every expected output with the expected values."""
    for name, want in expected.items():
        if name not in got:
            raise BadResponse(f"{what}: output {name} missing (got {sorted(got)})")
        if got[name].shape != want.shape or not np.allclose(got[name], want, rtol=0, atol=atol):
            raise BadResponse(f"{what}: output {name} is {got[name]!r}, expected {want!r}")
