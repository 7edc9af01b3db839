"""How large one request may be: bodies, messages, loads, tensors (docs/security.md)."""

from __future__ import annotations

from pydantic import Field

from inferplex.config.settings.section import SettingsSection

#: instances of one model version at most (ServerConfig.max_model_instances)
DEFAULT_MAX_MODEL_INSTANCES = 64


class RequestLimitSettings(SettingsSection):
    """Sizes past which a request is refused before it costs more than its bytes."""

    max_request_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1, description="requests with a larger body get 413"
    )
    max_json_request_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1,
        description="the JSON of an HTTP request (the whole body, or the JSON header of a "
        "binary one, once decompressed) above this gets 413: parsed, JSON takes 10-20x its "
        "size in Python objects; large tensors go in binary (Inference-Header-Content-Length)",
    )
    max_grpc_message_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1, description="gRPC receive/send message size limit"
    )
    max_model_instances: int = Field(
        default=DEFAULT_MAX_MODEL_INSTANCES,
        ge=1,
        description="instances of one model version at most, however the count is set "
        "(config file, a load's config, auto-completion, the instances endpoint): above it the "
        "load or call gets 400 naming this limit (each instance is a backend session and a "
        "thread or process)",
    )
    max_load_config_bytes: int = Field(
        default=1024 * 1024,
        ge=1,
        description="a load's 'config' parameter (a JSON model configuration) above this gets "
        "413, and so does a load body holding more JSON values than half of it (its model "
        "files are base64 strings: one value each)",
    )
    max_load_request_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1,
        description="HTTP load requests (with their 'file:' overrides, base64 model files) "
        "above this get 413; at most --max-request-bytes",
    )
    max_small_request_bytes: int = Field(
        default=16 * 1024,
        ge=1,
        description="request body (HTTP) or message (gRPC), inflated if compressed, of the "
        "calls that take none or a tiny one: health, metadata, ready, config, statistics, "
        "index, unload, instances, default version, shared memory, reflection (HTTP GET "
        "endpoints take no body at all); inference and loads get max_request_bytes / "
        "max_grpc_message_bytes. Past it: 413 / RESOURCE_EXHAUSTED, checked on the compressed "
        "size before any inflation and on the inflated size as it inflates",
    )
    max_tensor_elements: int = Field(
        default=256 * 1024 * 1024, ge=1, description="most elements one input tensor may have"
    )
    max_string_bytes: int = Field(
        default=64 * 1024 * 1024, ge=1, description="longest BYTES element accepted"
    )
