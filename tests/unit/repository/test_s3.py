"""s3:// repository locations, cache folders and the server config that names them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from inferplex import ServerConfig
from inferplex.config.s3_url import S3Location, default_cache_dir, is_s3_url
from inferplex.errors import ConfigError
from inferplex.repository.s3 import _safe


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://b", "b", ""),
        ("s3://b/", "b", ""),
        ("s3://b/models", "b", "models/"),
        ("s3://b//a/b/", "b", "a/b/"),
    ],
)
def test_locations(url: str, bucket: str, prefix: str) -> None:
    location = S3Location.parse(url)
    assert (location.bucket, location.prefix) == (bucket, prefix)
    assert location.url == f"s3://{bucket}/{prefix}"


def test_bad_locations() -> None:
    assert not is_s3_url("/models") and not is_s3_url(Path("s3:/x"))
    with pytest.raises(ConfigError, match="names no bucket"):
        S3Location.parse("s3:///models")
    with pytest.raises(ConfigError, match="not an s3://bucket/prefix URL"):
        S3Location.parse("gs://b/models")


def test_keys_that_would_leave_the_cache_are_unsafe() -> None:
    assert _safe("m/1/model.onnx")
    assert not _safe("../x") and not _safe("m/../../x") and not _safe("/etc/passwd")


def test_server_config_serves_an_s3_repository_from_its_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir("s3://b/team/models") == tmp_path / "xdg/inferplex/s3/b/team/models"
    config = ServerConfig(model_repository="s3://b/team/models")  # type: ignore[arg-type]
    assert config.model_repository_url == "s3://b/team/models"
    assert config.model_repository == tmp_path / "xdg/inferplex/s3/b/team/models"
    assert config.model_repository.is_dir()
    chosen = tmp_path / "cache"
    config = ServerConfig(model_repository="s3://b", model_repository_cache=chosen)  # type: ignore[arg-type]
    assert config.model_repository == chosen and chosen.is_dir()
    with pytest.raises(ValidationError, match="names no bucket"):
        ServerConfig(model_repository="s3://")  # type: ignore[arg-type]
