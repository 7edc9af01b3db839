"""inferplex: a multi-model inference server speaking the KServe V2 protocol.

In-process use::

    from inferplex import Server, ServerConfig, InferenceRequest, Tensor

    with Server(ServerConfig(model_repository="models", http_port=0, grpc_port=0)) as server:
        response = server.infer(InferenceRequest("add_sub", inputs=[...]))

Names are imported on first use, so ``import inferplex.datatypes`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from inferplex.version import __version__

if TYPE_CHECKING:
    from inferplex.config import ModelConfig, ServerConfig
    from inferplex.engine.inference import InferenceEngine
    from inferplex.errors import InferplexError
    from inferplex.server import Server, build_engine
    from inferplex.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

_EXPORTS = {
    "InferenceEngine": "inferplex.engine.inference",
    "InferenceRequest": "inferplex.types",
    "InferenceResponse": "inferplex.types",
    "InferplexError": "inferplex.errors",
    "ModelConfig": "inferplex.config",
    "RequestedOutput": "inferplex.types",
    "Server": "inferplex.server",
    "ServerConfig": "inferplex.config",
    "Tensor": "inferplex.types",
    "build_engine": "inferplex.server",
}

__all__ = [
    "InferenceEngine",
    "InferenceRequest",
    "InferenceResponse",
    "InferplexError",
    "ModelConfig",
    "RequestedOutput",
    "Server",
    "ServerConfig",
    "Tensor",
    "__version__",
    "build_engine",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'inferplex' has no attribute '{name}'")
    return getattr(importlib.import_module(module), name)
