"""S3Repository: a model repository in an S3-compatible store (``s3://bucket/prefix``), served
from a local copy.

``refresh`` (blocking) brings the local copy in line with the bucket: objects new or changed
since the last sync (by ETag) are downloaded (to a temporary name, then moved into place, so
a scan never sees half a file), downloaded files whose object is gone are deleted, and each file
gets its object's modification time, so the repository's fingerprints do not change on a
restart. The server syncs once at start; in poll mode before each scan; before an explicit
load. The copy is an ordinary local repository to everything else.

Credentials and region come the usual AWS ways (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, ``AWS_DEFAULT_REGION``,
instance roles); ``endpoint_url`` points at any S3-compatible store (MinIO, Ceph, moto).
Needs the ``s3`` extra (boto3).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path, PurePosixPath
from typing import Any

from inferplex.config.s3_url import S3Location
from inferplex.errors import ConfigError

logger = logging.getLogger(__name__)

#: what the last sync downloaded: relative path -> ETag (hidden: the model scan skips it)
MANIFEST = ".inferplex-s3.json"


class S3Repository:
    """The local copy of an S3 repository and the sync that keeps it current."""

    def __init__(
        self, url: str, cache_dir: Path, endpoint_url: str = "", client: Any = None
    ) -> None:
        self.location = S3Location.parse(url)
        self.cache_dir = cache_dir
        self.endpoint_url = endpoint_url
        self._client = client
        self._lock = threading.Lock()  # one sync at a time (poll and explicit loads)

    def local_path(self) -> Path:
        return self.cache_dir

    def refresh(self) -> bool:
        """Sync the local copy; returns whether anything changed. Blocking. ConfigError when
        the bucket cannot be listed (the copy is left as it was)."""
        with self._lock:
            return self._sync()

    # -- the sync ---------------------------------------------------------------------------
    def _sync(self) -> bool:
        client = self._s3()
        remote = self._list(client)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        manifest = self._read_manifest()
        changed = False
        for relative, (etag, modified) in sorted(remote.items()):
            target = self.cache_dir / relative
            if manifest.get(relative) == etag and target.is_file():
                continue
            self._download(client, relative, target, modified)
            manifest[relative] = etag
            changed = True
        # only files this sync downloaded are deleted: the cache folder may hold others
        for relative in sorted(set(manifest) - set(remote)):
            path = self.cache_dir / relative
            path.unlink(missing_ok=True)
            del manifest[relative]
            changed = True
            for folder in path.parents:
                if folder == self.cache_dir or any(folder.iterdir()):
                    break
                folder.rmdir()
        if changed:
            self._write_manifest(manifest)
            logger.info("model repository %s synced to %s", self.location.url, self.cache_dir)
        return changed

    def _list(self, client: Any) -> dict[str, tuple[str, float]]:
        """relative path -> (ETag, modification time) of every object under the prefix."""
        from botocore.exceptions import BotoCoreError, ClientError

        location = self.location
        objects: dict[str, tuple[str, float]] = {}
        try:
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=location.bucket, Prefix=location.prefix
            )
            for page in pages:
                for item in page.get("Contents", ()):
                    relative = item["Key"][len(location.prefix) :]
                    if not relative or relative.endswith("/"):
                        continue  # folder markers
                    if not _safe(relative):
                        logger.warning("skipping S3 object with an unsafe key: %r", item["Key"])
                        continue
                    modified = item["LastModified"].timestamp()
                    objects[relative] = (item["ETag"].strip('"'), modified)
        except (BotoCoreError, ClientError) as exc:
            raise ConfigError(f"model repository {location.url}: cannot list it: {exc}") from None
        return objects

    def _download(self, client: Any, relative: str, target: Path, modified: float) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.part")
        key = self.location.prefix + relative
        try:
            client.download_file(self.location.bucket, key, str(partial))
        except (BotoCoreError, ClientError) as exc:
            partial.unlink(missing_ok=True)
            raise ConfigError(
                f"model repository {self.location.url}: cannot download '{key}': {exc}"
            ) from None
        os.utime(partial, (modified, modified))
        os.replace(partial, target)

    def _s3(self) -> Any:
        if self._client is None:
            try:
                import boto3
            except ImportError:
                raise ConfigError(
                    "an s3:// model repository needs boto3: pip install 'inferplex[s3]'"
                ) from None
            self._client = boto3.client("s3", endpoint_url=self.endpoint_url or None)
        return self._client

    def _read_manifest(self) -> dict[str, str]:
        try:
            data = json.loads((self.cache_dir / MANIFEST).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_manifest(self, manifest: dict[str, str]) -> None:
        path = self.cache_dir / MANIFEST
        partial = path.with_name(f"{MANIFEST}.part")
        partial.write_text(json.dumps(manifest, sort_keys=True))
        os.replace(partial, path)


def _safe(relative: str) -> bool:
    """A key that stays inside the cache folder (no absolute paths, no '..')."""
    path = PurePosixPath(relative)
    return not path.is_absolute() and ".." not in path.parts
