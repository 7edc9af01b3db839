"""Models of one or two operators, with tensors named as Triton's examples name them
(INPUT0, OUTPUT0): arithmetic, every datatype, reshaping, and a model that takes its time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from examples.modelgen.onnxfile import Dims, const, save, session, timed, value_info


def add_sub(
    repo: Path, name: str = "add_sub", version: int = 1, dtype: str = "FP32", dims: int = 16
) -> Path:
    """INPUT0, INPUT1 ``[-1, dims]`` -> OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    shape: list[int | str] = ["batch", dims]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        name,
        [value_info("INPUT0", dtype, shape), value_info("INPUT1", dtype, shape)],
        [value_info("OUTPUT0", dtype, shape), value_info("OUTPUT1", dtype, shape)],
    )
    return save(graph, repo, name, version)


def identity(repo: Path, datatype: str, name: str = "", version: int = 1) -> Path:
    """INPUT0 ``[-1, -1]`` -> OUTPUT0, unchanged, for any V2 datatype.

    The name defaults to ``identity_<datatype>`` in lower case (``identity_fp32``).
    ONNX Runtime's Identity kernel covers every V2 datatype including strings (checked by
    the unit tests), so no other op is needed.
    """
    name = name or f"identity_{datatype.lower()}"
    shape = ["batch", "n"]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        name,
        [value_info("INPUT0", datatype, shape)],
        [value_info("OUTPUT0", datatype, shape)],
    )
    return save(graph, repo, name, version)


def scale(
    repo: Path, name: str = "scale", version: int = 1, factor: float = 2.0, dims: Dims = ("n",)
) -> Path:
    """INPUT0 FP32 ``[-1, *dims]`` -> OUTPUT0 = INPUT0 * ``factor``: models that answer
    differently with the same signature (cascades, routing, fallbacks in the tests)."""
    shape = ["batch", *dims]
    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT0", "factor"], ["OUTPUT0"])],
        name,
        [value_info("INPUT0", "FP32", shape)],
        [value_info("OUTPUT0", "FP32", shape)],
        [const("factor", np.array(factor, dtype=np.float32))],
    )
    return save(graph, repo, name, version)


def reshape(repo: Path, name: str = "reshape", version: int = 1) -> Path:
    """INPUT0 FP32 ``[-1]``, SHAPE INT64 ``[1]`` -> OUTPUT0 = INPUT0 reshaped to SHAPE.

    A model that fails on demand, inside ONNX Runtime: a SHAPE that does not match INPUT0's
    element count passes request validation and fails at execution (circuit breaker tests).
    """
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["INPUT0", "SHAPE"], ["OUTPUT0"])],
        name,
        [value_info("INPUT0", "FP32", ["n"]), value_info("SHAPE", "INT64", [1])],
        [value_info("OUTPUT0", "FP32", ["m"])],
    )
    return save(graph, repo, name, version)


def slow(repo: Path, name: str = "slow", version: int = 1, seconds: float = 1.0) -> Path:
    """INPUT0 FP32 ``[-1]`` -> OUTPUT0, unchanged, but each call takes about ``seconds``.

    The delay is a Loop of small matrix products whose result is carried alongside the input,
    so ONNX Runtime can neither fold nor prune it. The products are too small for ONNX
    Runtime to spread over threads, so the time does not depend on the session's thread
    count. The trip count is calibrated on this machine when the model is built.
    """
    probe_trips = 10_000
    path = save(_slow_graph(name, probe_trips), repo, name, version)
    probe = session(path)
    feed = {"INPUT0": np.zeros(1, dtype=np.float32)}
    probe.run(None, feed)
    elapsed = min(timed(probe.run, None, feed) for _ in range(3))
    trips = max(1, round(probe_trips * seconds / elapsed))
    return save(_slow_graph(name, trips), repo, name, version)


def _slow_graph(name: str, trips: int) -> onnx.GraphProto:
    size = 32
    rng = np.random.default_rng(0)
    # An orthogonal matrix and tanh keep the carried state finite for any trip count.
    weights = np.linalg.qr(rng.standard_normal((size, size)))[0]
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["x_in"], ["x_out"]),
            helper.make_node("MatMul", ["state_in", "weights"], ["product"]),
            helper.make_node("Tanh", ["product"], ["state_out"]),
        ],
        f"{name}_body",
        [
            value_info("iteration", "INT64", []),
            value_info("cond_in", "BOOL", []),
            value_info("x_in", "FP32", ["n"]),
            value_info("state_in", "FP32", [size, size]),
        ],
        [
            value_info("cond_out", "BOOL", []),
            value_info("x_out", "FP32", ["n"]),
            value_info("state_out", "FP32", [size, size]),
        ],
    )
    return helper.make_graph(
        [
            helper.make_node(
                "Loop", ["trips", "", "INPUT0", "weights"], ["OUTPUT0", "state"], body=body
            )
        ],
        name,
        [value_info("INPUT0", "FP32", ["n"])],
        [value_info("OUTPUT0", "FP32", ["n"])],
        [const("trips", np.array(trips, dtype=np.int64)), const("weights", weights)],
    )
