"""Tokens given as files are out of reach of model code (issue 30): a Python model reads
its own environment and the server's ``/proc/<pid>/environ`` (its parent, the same user),
and finds neither token, where tokens given in the environment are there to read (the
documented reason to prefer files); the tokens still guard the API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from examples.modelgen.decoupled import write_model
from inferplex_tools.benchtool.launch import RunningServer, start_server

INFERENCE = "inference-token-from-file"
MANAGEMENT = "management-token-from-file"

#: answers with its own environment and its parent's (the server's), as the model sees them
MODEL = """
import json, os
import numpy as np
from inferplex.handler import BaseHandler

class Handler(BaseHandler):
    def inference(self, data):
        with open(f"/proc/{os.getppid()}/environ", "rb") as file:
            server = file.read().decode(errors="replace")
        text = json.dumps({"own": dict(os.environ), "server": server}).encode()
        return {"ENV": np.array([text], dtype=object)}
"""
CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "ENV" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


def serve(root: Path, by_file: bool) -> RunningServer:
    repo = root / "repository"
    if not repo.exists():
        repo.mkdir()
        write_model(repo, "env", MODEL, CONFIG)
    if by_file:
        files = {}
        for name, token in (("inference", INFERENCE), ("management", MANAGEMENT)):
            path = root / f"{name}.token"
            path.write_text(token + "\n")
            path.chmod(0o600)
            files[f"INFERPLEX_{name.upper()}_TOKEN_FILE"] = str(path)
        return start_server(repo, root / "files.log", env=files)
    tokens = {"INFERPLEX_INFERENCE_TOKEN": INFERENCE, "INFERPLEX_MANAGEMENT_TOKEN": MANAGEMENT}
    return start_server(repo, root / "env.log", env=tokens)


@pytest.fixture(scope="module", params=["file", "environment"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningServer, bool]]:
    by_file = request.param == "file"
    running = serve(tmp_path_factory.mktemp(f"tokens_{request.param}"), by_file)
    yield running, by_file
    assert running.stop() == 0, running.log()


def infer(server: RunningServer, token: str | None) -> requests.Response:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [0.0]}]}
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"http://{server.http_url}/v2/models/env/infer"
    return requests.post(url, json=body, headers=headers, timeout=60)


def test_model_code_reads_the_tokens_only_from_the_environment(
    server: tuple[RunningServer, bool],
) -> None:
    running, by_file = server
    reply = infer(running, INFERENCE)
    assert reply.status_code == 200, reply.text
    seen = json.loads(reply.json()["outputs"][0]["data"][0])
    own = json.dumps(seen["own"])
    assert INFERENCE not in own and MANAGEMENT not in own
    in_server = INFERENCE in seen["server"] and MANAGEMENT in seen["server"]
    # from a file, the server's environment names the files only; from the environment,
    # a model of the same user reads them there (what docs/security.md warns of)
    assert in_server is not by_file


def test_the_tokens_guard_the_api(server: tuple[RunningServer, bool]) -> None:
    running, _ = server
    assert infer(running, None).status_code == 401
    assert infer(running, "wrong").status_code == 401
    assert infer(running, MANAGEMENT).status_code == 200
    url = f"http://{running.http_url}/v2/repository/models/env/unload"
    refused = requests.post(url, headers={"Authorization": f"Bearer {INFERENCE}"}, timeout=60)
    assert refused.status_code == 403
