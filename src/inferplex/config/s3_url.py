"""An ``s3://bucket/prefix`` model repository URL, as the configuration reads it: what it
names and where its local copy lives by default (repository/s3.py syncs that copy)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from inferplex.errors import ConfigError

SCHEME = "s3://"


def is_s3_url(value: object) -> bool:
    return isinstance(value, str) and value.startswith(SCHEME)


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str
    """the key prefix of the repository, '' or ending with '/'"""

    @classmethod
    def parse(cls, url: str) -> S3Location:
        if not is_s3_url(url):
            raise ConfigError(f"model repository '{url}' is not an s3://bucket/prefix URL")
        bucket, _, prefix = url[len(SCHEME) :].partition("/")
        if not bucket:
            raise ConfigError(f"model repository '{url}' names no bucket (s3://bucket/prefix)")
        prefix = prefix.strip("/")
        return cls(bucket, f"{prefix}/" if prefix else "")

    @property
    def url(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}"


def default_cache_dir(url: str) -> Path:
    """Where the copy of ``url`` lives unless a cache folder is given."""
    location = S3Location.parse(url)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "inferplex" / "s3" / location.bucket / (location.prefix.strip("/") or "_root")
