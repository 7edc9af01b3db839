"""Configuration: ServerConfig (settings) and ModelConfig (one per model) with its readers."""

from inferplex.config.model_config import (
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    QueuePolicy,
    RateLimiter,
    RateLimiterResource,
    ResponseCache,
    Scheduling,
    TensorConfig,
    VersionPolicy,
)
from inferplex.config.server_config import ServerConfig

__all__ = [
    "DynamicBatching",
    "InstanceGroup",
    "ModelConfig",
    "QueuePolicy",
    "RateLimiter",
    "RateLimiterResource",
    "ResponseCache",
    "Scheduling",
    "ServerConfig",
    "TensorConfig",
    "VersionPolicy",
]
