from pathlib import Path

import numpy as np
import pytest

from inferplex.datatypes import deserialize_bytes
from inferplex.errors import ConfigError, InvalidInputError, PayloadTooLargeError
from inferplex.security import encryption
from inferplex.security.limits import RequestLimits
from inferplex.types import InferenceRequest, Tensor


@pytest.fixture
def key() -> bytes:
    return encryption.parse_key(encryption.generate_key(), "test")


def test_round_trip_in_memory(tmp_path: Path, key: bytes) -> None:
    plain = tmp_path / "model.onnx"
    plain.write_bytes(b"\x08\x07model bytes")
    encryption.encrypt_file(plain, plain, key)
    data = plain.read_bytes()
    assert encryption.is_encrypted(data)
    assert b"model bytes" not in data
    encryption.use_key(key)
    try:
        assert encryption.read_model_bytes(plain) == b"\x08\x07model bytes"
        assert encryption.model_source(plain) == b"\x08\x07model bytes"
    finally:
        encryption.use_key(None)


def test_plain_files_load_by_path(tmp_path: Path) -> None:
    plain = tmp_path / "model.onnx"
    plain.write_bytes(b"plain")
    assert encryption.model_source(plain) == str(plain)


def test_wrong_key_is_a_clear_error(tmp_path: Path, key: bytes) -> None:
    target = tmp_path / "model.onnx"
    target.write_bytes(encryption.encrypt_bytes(b"secret", key))
    other = encryption.parse_key(encryption.generate_key(), "test")
    with pytest.raises(ConfigError, match="wrong model key"):
        encryption.decrypt_bytes(target.read_bytes(), other, str(target))
    with pytest.raises(ConfigError, match="no model key is set"):
        encryption.decrypt_bytes(target.read_bytes(), None, str(target))


def test_damaged_file_is_refused(key: bytes) -> None:
    data = bytearray(encryption.encrypt_bytes(b"secret", key))
    data[-1] ^= 1
    with pytest.raises(ConfigError, match="damaged"):
        encryption.decrypt_bytes(bytes(data), key, "m")


@pytest.mark.parametrize("text", ["abc", "zz" * 32, "00" * 16])
def test_bad_keys_name_their_source(text: str) -> None:
    with pytest.raises(ConfigError, match="from the env: must be 64 hex"):
        encryption.parse_key(text, "the env:")


def test_key_from_file_and_environment(
    tmp_path: Path, key: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(key.hex() + "\n")
    assert encryption.load_key(key_file=key_file) == key
    monkeypatch.setenv("INFERPLEX_MODEL_KEY", key.hex())
    assert encryption.load_key() == key
    monkeypatch.delenv("INFERPLEX_MODEL_KEY")
    assert encryption.load_key() is None


def test_encrypting_twice_is_refused(tmp_path: Path, key: bytes) -> None:
    path = tmp_path / "m"
    path.write_bytes(encryption.encrypt_bytes(b"x", key))
    with pytest.raises(ConfigError, match="already encrypted"):
        encryption.encrypt_file(path, path, key)


def _request(data: np.ndarray, datatype: str) -> InferenceRequest:
    return InferenceRequest("m", [Tensor("INPUT0", datatype, data.shape, data)])


def test_limits_on_elements_and_string_lengths() -> None:
    limits = RequestLimits(max_tensor_elements=8, max_string_bytes=4)
    limits.check(_request(np.zeros(8, np.float32), "FP32"))
    with pytest.raises(PayloadTooLargeError, match=r"'INPUT0' has 9 elements.*limit of 8"):
        limits.check(_request(np.zeros(9, np.float32), "FP32"))
    limits.check(_request(np.array([b"abcd"], dtype=object), "BYTES"))
    with pytest.raises(PayloadTooLargeError, match="element of 5 bytes"):
        limits.check(_request(np.array([b"a", b"abcde"], dtype=object), "BYTES"))


def test_a_huge_bytes_count_is_refused_before_allocating() -> None:
    with pytest.raises(InvalidInputError, match="need at least 4000000000000 bytes"):
        deserialize_bytes(b"\x00" * 8, 10**12, "INPUT0")
