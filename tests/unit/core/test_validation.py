import numpy as np
import pytest

from inferplex.config import ModelConfig
from inferplex.core.validation import RequestValidator
from inferplex.errors import InvalidInputError
from inferplex.types import InferenceRequest, RequestedOutput, Tensor

CONFIG = ModelConfig(
    name="m",
    max_batch_size=4,
    input=[
        {"name": "a", "data_type": "FP32", "dims": [3]},
        {"name": "b", "data_type": "INT64", "dims": [-1]},
        {"name": "opt", "data_type": "FP32", "dims": [1], "optional": True},
        {"name": "r", "data_type": "FP32", "dims": [4], "reshape": [2, 2], "optional": True},
    ],
    output=[{"name": "y", "data_type": "FP32", "dims": [3]}, {"name": "z", "data_type": "FP32"}],
)


def tensor(name: str, datatype: str, shape: tuple[int, ...], dtype: object = np.float32) -> Tensor:
    return Tensor(name, datatype, shape, np.zeros(shape, dtype=dtype))


def request(*inputs: Tensor, outputs: tuple[str, ...] = ()) -> InferenceRequest:
    return InferenceRequest("m", list(inputs), outputs=[RequestedOutput(n) for n in outputs])


VALID = (tensor("a", "FP32", (2, 3)), tensor("b", "INT64", (2, 7), np.int64))


def test_valid_request_gives_feeds_and_batch_size() -> None:
    feeds, batch = RequestValidator(CONFIG).feeds(request(*VALID))
    assert batch == 2
    assert set(feeds) == {"a", "b"}
    assert feeds["a"].shape == (2, 3)


def test_reshape_applies_to_the_backend_view() -> None:
    feeds, _ = RequestValidator(CONFIG).feeds(request(*VALID, tensor("r", "FP32", (2, 4))))
    assert feeds["r"].shape == (2, 2, 2)


@pytest.mark.parametrize(
    ("inputs", "fragment"),
    [
        ((tensor("x", "FP32", (1, 3)), *VALID), "unknown input 'x'"),
        ((tensor("a", "FP64", (2, 3), np.float64), VALID[1]), "datatype FP64"),
        ((tensor("a", "FP32", (2, 4)), VALID[1]), "expects [-1, 3]"),
        ((tensor("a", "FP32", (3,)), VALID[1]), "shape [3]"),
        ((tensor("a", "FP32", (5, 3)), tensor("b", "INT64", (5, 1), np.int64)), "max_batch_size 4"),
        ((tensor("a", "FP32", (1, 3)), VALID[1]), "share the batch dimension"),
        ((VALID[0],), "Got input(s) ['a'], but missing required input(s) ['b']"),
        ((*VALID, VALID[0]), "more than once"),
    ],
)
def test_bad_inputs_name_the_field(inputs: tuple[Tensor, ...], fragment: str) -> None:
    with pytest.raises(InvalidInputError) as error:
        RequestValidator(CONFIG).feeds(request(*inputs))
    assert fragment in error.value.message


def test_data_must_be_an_array_of_the_declared_datatype() -> None:
    # the frontends decode to the declared dtype; the in-process API takes what it is given
    wide = Tensor("a", "FP32", (2, 3), np.zeros((2, 3)))
    with pytest.raises(InvalidInputError, match=r"input 'a' \(FP32\) holds numpy float64 data"):
        RequestValidator(CONFIG).feeds(request(wide, VALID[1]))
    listed = Tensor("a", "FP32", (1, 3), [0.0, 1.0, 2.0])
    with pytest.raises(InvalidInputError, match="holds list data, expected a numpy array of"):
        RequestValidator(CONFIG).feeds(request(listed, tensor("b", "INT64", (1, 1), np.int64)))


def test_bytes_inputs_take_object_bytes_or_str_arrays() -> None:
    config = ModelConfig(
        name="s", input=[{"name": "s", "data_type": "BYTES", "dims": [-1]}], output=[]
    )
    for data in (np.array([b"x"], dtype=object), np.array([b"x"]), np.array(["x"])):
        feeds, _ = RequestValidator(config).feeds(
            InferenceRequest("s", [Tensor("s", "BYTES", (1,), data)])
        )
        assert feeds["s"] is data


def test_element_count_must_match_shape() -> None:
    bad = Tensor("a", "FP32", (2, 3), np.zeros(5, dtype=np.float32))
    with pytest.raises(InvalidInputError, match="has 5 elements"):
        RequestValidator(CONFIG).feeds(request(bad, VALID[1]))


def test_requested_outputs_are_checked_and_deduplicated() -> None:
    validator = RequestValidator(CONFIG)
    assert validator.output_names(request()) == ["y", "z"]
    assert validator.output_names(request(outputs=("z", "z"))) == ["z"]
    with pytest.raises(InvalidInputError, match="unknown output 'w'"):
        validator.output_names(request(outputs=("w",)))


def test_unbatched_model_checks_full_shape() -> None:
    config = ModelConfig(
        name="u", input=[{"name": "a", "data_type": "FP32", "dims": [2, -1]}], output=[]
    )
    validator = RequestValidator(config)
    _, batch = validator.feeds(InferenceRequest("u", [tensor("a", "FP32", (2, 9))]))
    assert batch == 1
    with pytest.raises(InvalidInputError, match=r"expects \[2, -1\]"):
        validator.feeds(InferenceRequest("u", [tensor("a", "FP32", (3, 9))]))


def test_shape_key_only_where_requests_can_differ() -> None:
    """Requests of a model whose inputs are all required with fixed dims always fit one
    batch; otherwise the names and non-batch dims of their feeds decide."""
    fixed = ModelConfig(
        name="f", max_batch_size=4, input=[{"name": "a", "data_type": "FP32", "dims": [3]}]
    )
    validator = RequestValidator(fixed)
    feeds, _ = validator.feeds(InferenceRequest("f", [tensor("a", "FP32", (2, 3))]))
    assert validator.shape_key(feeds) is None
    validator = RequestValidator(CONFIG)  # a variable dim and optional inputs
    feeds, _ = validator.feeds(request(*VALID))
    other, _ = validator.feeds(request(VALID[0], tensor("b", "INT64", (2, 5), np.int64)))
    assert validator.shape_key(feeds) == (("a", (3,)), ("b", (7,)))
    assert validator.shape_key(feeds) != validator.shape_key(other)


def test_a_flat_array_is_reshaped_to_the_declared_shape() -> None:
    flat = Tensor("a", "FP32", (2, 3), np.arange(6, dtype=np.float32))
    feeds, _ = RequestValidator(CONFIG).feeds(request(flat, VALID[1]))
    assert feeds["a"].shape == (2, 3)
