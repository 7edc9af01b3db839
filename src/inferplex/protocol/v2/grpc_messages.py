"""The V2 gRPC answers that are not inference: metadata, configuration, statistics,
repository index and shared-memory status are the engine's dicts in Triton's JSON shape,
which is protobuf's JSON mapping of the same messages, so ``json_format.ParseDict`` renders
them; keys the proto does not declare are skipped."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from inferplex.protocol.v2 import generated as pb


def _parse(data: dict[str, Any], message: Any) -> Any:
    return json_format.ParseDict(data, message, ignore_unknown_fields=True)


def encode_server_metadata(metadata: dict[str, Any]) -> Any:
    """engine.server_metadata() -> ServerMetadataResponse."""
    return _parse(metadata, pb.ServerMetadataResponse())


def encode_model_metadata(metadata: dict[str, Any]) -> Any:
    """engine.model_metadata() -> ModelMetadataResponse."""
    return _parse(metadata, pb.ModelMetadataResponse())


def encode_model_config(triton_config: dict[str, Any]) -> Any:
    """ModelConfig.to_triton_dict() -> ModelConfigResponse (enums such as data_type by name)."""
    response = pb.ModelConfigResponse()
    _parse(triton_config, response.config)
    return response


def encode_model_statistics(stats: list[dict[str, Any]]) -> Any:
    """engine.model_statistics() -> ModelStatisticsResponse."""
    return _parse({"model_stats": stats}, pb.ModelStatisticsResponse())


def encode_repository_index(index: list[dict[str, Any]]) -> Any:
    """engine.repository_index() -> RepositoryIndexResponse."""
    return _parse({"models": index}, pb.RepositoryIndexResponse())


def encode_shm_status(regions: list[dict[str, Any]]) -> Any:
    """Regions.status() -> SystemSharedMemoryStatusResponse."""
    return _parse(
        {"regions": {region["name"]: region for region in regions}},
        pb.SystemSharedMemoryStatusResponse(),
    )
