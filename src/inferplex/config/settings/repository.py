"""Where the models come from: the repository folder (or an s3:// copy) and which config
file each model is read from."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import DirectoryPath, Field, field_validator, model_validator

from inferplex.config.s3_url import S3Location, default_cache_dir, is_s3_url
from inferplex.config.settings.section import NoFlag, OneValue, SettingsSection
from inferplex.errors import ConfigError


class RepositorySettings(SettingsSection):
    """The model repository: a folder, or an s3:// prefix served from a local copy."""

    model_repository: Annotated[
        DirectoryPath,
        OneValue("inferplex serves one model repository (tritonserver serves several)"),
    ] = Field(
        description="folder holding one sub-folder per model (must exist); or s3://bucket/prefix, "
        "served from a local copy in model_repository_cache (then this is that folder)"
    )
    model_repository_url: Annotated[str, NoFlag] = Field(
        default="",
        description="s3://bucket/prefix the repository is synced from (set from "
        "model_repository when that is an s3:// URL)",
    )
    model_repository_cache: Path | None = Field(
        default=None,
        description="local copy of an s3:// repository (default ~/.cache/inferplex/s3/...)",
    )
    s3_endpoint_url: str = Field(
        default="", description="S3-compatible endpoint (MinIO, Ceph, ...); empty = AWS"
    )
    model_config_name: str = Field(
        default="",
        description="read each model's configs/NAME.pbtxt instead of its config file where "
        "it has one (as tritonserver's --model-config-name); empty = the config file",
    )

    @field_validator("model_config_name")
    @classmethod
    def _config_name(cls, value: str) -> str:
        """A file name under configs/, as tritonserver takes it: no path, no space."""
        if value and (not re.fullmatch(r"[^\s/\\]+", value) or value in (".", "..")):
            raise ValueError(f"{value!r} is not a config name such as h100 (configs/h100.pbtxt)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _remote_repository(cls, data: Any) -> Any:
        """An s3:// model_repository is served from its local copy: model_repository becomes
        that folder (created here so it validates) and model_repository_url keeps the URL."""
        if not isinstance(data, dict) or not is_s3_url(data.get("model_repository")):
            return data
        url = data["model_repository"]
        try:
            S3Location.parse(url)
        except ConfigError as exc:
            raise ValueError(exc.message) from None
        cache = Path(data.get("model_repository_cache") or default_cache_dir(url))
        cache.mkdir(parents=True, exist_ok=True)
        return {**data, "model_repository": cache, "model_repository_url": url}
