"""``inferplex encrypt --new-key`` as a user runs it (a real process, umask 000): the key file
is 0600 from the start, an existing one is kept, and a real server serves the model with it
over HTTP and gRPC."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from examples.modelgen import add_sub
from inferplex_tools.benchtool.launch import start_server

grpcclient = pytest.importorskip("tritonclient.grpc")
httpclient = pytest.importorskip("tritonclient.http")


#: the ``inferplex`` command, in a process where changing a file's mode fails: a key file
#: created with the default mode and restricted afterwards was readable until then
NO_CHMOD = """
import os, pathlib, sys

def refuse(*args, **kwargs):
    sys.exit("the key file's mode was changed after it was created")

os.chmod = os.fchmod = pathlib.Path.chmod = refuse
from inferplex.cli.main import main

main(prog_name="inferplex")
"""


def encrypt(*args: str) -> subprocess.CompletedProcess[str]:
    """``inferplex encrypt ARGS`` under umask 000, where a file made with the default mode
    would be world-readable, and no mode may be changed after the fact."""
    command = ["sh", "-c", 'umask 000 && exec "$0" "$@"', sys.executable, "-c", NO_CHMOD]
    return subprocess.run(
        [*command, "encrypt", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_new_key_is_private_and_serves_the_encrypted_model(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    add_sub(repository)
    model = repository / "add_sub" / "1" / "model.onnx"
    key_file = tmp_path / "keys" / "model.key"
    key_file.parent.mkdir()
    done = encrypt(str(model), "--new-key", "--key-file", str(key_file))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    key = key_file.read_text()

    again = encrypt(str(model), "--new-key", "--key-file", str(key_file))
    assert again.returncode == 2 and "refusing to overwrite a key" in again.stderr
    assert key_file.read_text() == key

    server = start_server(
        repository, tmp_path / "server.log", env={"INFERPLEX_MODEL_KEY_FILE": str(key_file)}
    )
    try:
        data = np.arange(16, dtype=np.float32).reshape(1, 16)
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(data)
            result = client.infer("add_sub", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
        finally:
            client.close()
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            tensors = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            for tensor in tensors:
                tensor.set_data_from_numpy(data)
            answer = grpc.infer("add_sub", tensors)
            np.testing.assert_array_equal(answer.as_numpy("OUTPUT1"), data * 0)
    finally:
        assert server.stop() == 0, server.log()
