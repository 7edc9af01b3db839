"""The engine's settings: the model config's ``parameters`` (config.pbtxt or YAML), each
checked with a ConfigError naming it and what it takes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from inferplex.errors import ConfigError

#: dtypes the ``dtype`` parameter accepts ("auto": the checkpoint's own)
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """How one LLM is served (docs/llm.md lists each with its default)."""

    #: bytes of the KV cache (its blocks are made at load and count in the model's memory)
    kv_cache_bytes: int = 256 * 2**20
    #: tokens per KV block
    block_size: int = 16
    #: sequences in a step at most (also the default instance count: the requests in flight)
    max_num_seqs: int = 64
    #: tokens in a step at most (decodes and prompt chunks together)
    max_num_batched_tokens: int = 512
    #: the longest prompt + output (0: the model's max_position_embeddings)
    max_model_len: int = 0
    #: share the KV blocks of prompts that begin alike
    enable_prefix_caching: bool = True
    dtype: str = "auto"
    #: max_tokens of a request that sets none
    default_max_tokens: int = 16
    #: intra-op threads of the engine's forward pass (0: the instance's)
    threads: int = 0


_MINIMUM = {
    "kv_cache_bytes": 1,
    "block_size": 1,
    "max_num_seqs": 1,
    "max_num_batched_tokens": 1,
    "max_model_len": 0,
    "default_max_tokens": 1,
    "threads": 0,
}


def read_settings(parameters: Mapping[str, str], model: str) -> EngineSettings:
    """The settings the config's parameters set (others keep their defaults)."""
    values: dict[str, object] = {}
    for item in fields(EngineSettings):
        raw = parameters.get(item.name)
        if raw is None:
            continue
        if item.name == "enable_prefix_caching":
            if raw.lower() not in ("true", "false"):
                raise ConfigError(
                    f"model '{model}': parameter enable_prefix_caching must be true or false, "
                    f"got '{raw}'"
                )
            values[item.name] = raw.lower() == "true"
        elif item.name == "dtype":
            if raw not in DTYPES:
                raise ConfigError(
                    f"model '{model}': parameter dtype must be one of {list(DTYPES)}, got '{raw}'"
                )
            values[item.name] = raw
        else:
            values[item.name] = _integer(model, item.name, raw, _MINIMUM[item.name])
    return EngineSettings(**values)  # type: ignore[arg-type]


def _integer(model: str, name: str, raw: str, minimum: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(
            f"model '{model}': parameter {name} must be an integer >= {minimum}, got '{raw}'"
        )
    return value
