"""s3:// model repositories against a real S3-compatible server on loopback (moto's server
mode): the sync itself, then a server in poll mode picking up a new version from the bucket."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from moto.server import ThreadedMotoServer

from examples import modelgen
from inferplex import ServerConfig
from inferplex.config.writers import write_config
from inferplex.errors import ConfigError
from inferplex.repository.s3 import MANIFEST, S3Repository
from inferplex.server import build_engine
from inferplex_tools.benchtool.launch import RunningServer, start_server

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with pytest.MonkeyPatch.context() as patch:
        for key, value in CREDENTIALS.items():
            patch.setenv(key, value)
        patch.delenv("AWS_PROFILE", raising=False)
        moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        moto.start()
        host, port = moto.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            moto.stop()


@pytest.fixture
def s3(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint)


def upload(s3: Any, bucket: str, prefix: str, folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder).as_posix()}")


def test_sync_downloads_updates_and_deletes(s3: Any, endpoint: str, tmp_path: Path) -> None:
    s3.create_bucket(Bucket="sync")
    s3.put_object(Bucket="sync", Key="repo/m/config.pbtxt", Body=b"one")
    s3.put_object(Bucket="sync", Key="repo/m/1/model.onnx", Body=b"weights")
    s3.put_object(Bucket="sync", Key="repo/m/2/", Body=b"")  # a folder marker
    s3.put_object(Bucket="sync", Key="repo/../evil", Body=b"x")  # never leaves the cache
    s3.put_object(Bucket="sync", Key="other/n/config.pbtxt", Body=b"not ours")
    cache = tmp_path / "cache"
    repository = S3Repository("s3://sync/repo/", cache, endpoint)
    assert repository.local_path() == cache
    assert repository.refresh()
    files = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file())
    assert files == [MANIFEST, "m/1/model.onnx", "m/config.pbtxt"]
    assert (cache / "m/config.pbtxt").read_bytes() == b"one"
    assert not (tmp_path / "evil").exists()
    assert not repository.refresh()  # nothing changed
    (cache / "notes.txt").write_text("not from the bucket: left alone")
    mtime = (cache / "m/1/model.onnx").stat().st_mtime_ns
    s3.put_object(Bucket="sync", Key="repo/m/config.pbtxt", Body=b"two")
    s3.delete_object(Bucket="sync", Key="repo/m/1/model.onnx")
    assert repository.refresh()
    assert (cache / "m/config.pbtxt").read_bytes() == b"two"
    assert not (cache / "m/1").exists()
    assert (cache / "notes.txt").exists()
    # a fresh process with the same cache downloads nothing and keeps the file times
    s3.put_object(Bucket="sync", Key="repo/m/1/model.onnx", Body=b"weights")
    assert S3Repository("s3://sync/repo", cache, endpoint).refresh()
    assert not S3Repository("s3://sync/repo", cache, endpoint).refresh()
    assert (cache / "m/1/model.onnx").stat().st_mtime_ns >= mtime


def test_unreachable_bucket_is_a_clear_error(endpoint: str, tmp_path: Path) -> None:
    repository = S3Repository("s3://no-such-bucket/x", tmp_path, endpoint)
    with pytest.raises(
        ConfigError, match=r"s3://no-such-bucket/x/: cannot list it: .*NoSuchBucket"
    ):
        repository.refresh()


def wait_for(condition: Any, what: str, deadline_s: float = 60.0) -> Any:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        result = condition()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def served(
    s3: Any, endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningServer, Path]]:
    source = tmp_path_factory.mktemp("s3_source")
    path = modelgen.add_sub(source)
    write_config(source / "add_sub", modelgen.model_config(path, max_batch_size=8))
    s3.create_bucket(Bucket="models")
    upload(s3, "models", "prod", source)
    cache = tmp_path_factory.mktemp("s3_cache")
    env = {
        **CREDENTIALS,
        "INFERPLEX_S3_ENDPOINT_URL": endpoint,
        "INFERPLEX_MODEL_REPOSITORY_CACHE": str(cache),
        "INFERPLEX_MODEL_CONTROL_MODE": "poll",
        "INFERPLEX_REPOSITORY_POLL_SECS": "0.3",
    }
    log = tmp_path_factory.mktemp("s3_server") / "server.log"
    running = start_server("s3://models/prod", log, env=env)  # type: ignore[arg-type]
    yield running, source
    assert running.stop() == 0, running.log()


def test_server_serves_the_bucket_and_polls_new_versions(
    served: tuple[RunningServer, Path], s3: Any
) -> None:
    server, source = served
    base = f"http://{server.http_url}"
    assert requests.get(f"{base}/v2/models/add_sub").json()["versions"] == ["1"]
    body = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [1] * 16},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [2] * 16},
        ]
    }
    reply = requests.post(f"{base}/v2/models/add_sub/infer", json=body)
    assert reply.status_code == 200 and reply.json()["outputs"][0]["data"] == [3] * 16
    # a new version uploaded to the bucket is synced and served (latest policy: it replaces 1)
    modelgen.add_sub(source, version=2)
    s3.upload_file(str(source / "add_sub/2/model.onnx"), "models", "prod/add_sub/2/model.onnx")

    def serving_version_2() -> bool:
        return requests.get(f"{base}/v2/models/add_sub").json().get("versions") == ["2"]

    wait_for(serving_version_2, "version 2 to be served")
    reply = requests.post(f"{base}/v2/models/add_sub/infer", json=body)
    assert reply.status_code == 200 and reply.json()["model_version"] == "2"
    # routes come from the bucket too
    routing = "routes:\n  main: {targets: [{model: add_sub}]}\n"
    s3.put_object(Bucket="models", Key="prod/routing.yaml", Body=routing.encode())
    wait_for(
        lambda: [r["name"] for r in requests.get(f"{base}/v2/routes").json()["routes"]] == ["main"],
        "the route from the bucket",
    )
    assert requests.post(f"{base}/v2/models/main/infer", json=body).status_code == 200


async def test_explicit_mode_syncs_before_a_load(s3: Any, endpoint: str, tmp_path: Path) -> None:
    source = tmp_path / "source"
    path = modelgen.add_sub(source, name="first")
    write_config(source / "first", modelgen.model_config(path, max_batch_size=8))
    s3.create_bucket(Bucket="explicit")
    upload(s3, "explicit", "m", source)
    config = ServerConfig(
        model_repository="s3://explicit/m",  # type: ignore[arg-type]
        model_repository_cache=tmp_path / "cache",
        s3_endpoint_url=endpoint,
        model_control_mode="explicit",
    )
    engine = build_engine(config)
    await engine.start()
    try:
        index = engine.repository_index()
        assert [(m["name"], m["state"]) for m in index] == [("first", "UNAVAILABLE")]
        path = modelgen.add_sub(source, name="second")
        write_config(source / "second", modelgen.model_config(path, max_batch_size=8))
        upload(s3, "explicit", "m", source)
        await engine.load_model("second", {})
        assert engine.model_ready("second")
    finally:
        await engine.stop()
