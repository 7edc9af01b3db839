"""A Hugging Face model folder's ``config.json``, read into the shape the engine needs; an
architecture or setting the engine cannot run is a ConfigError naming it."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferplex.errors import ConfigError

#: architectures by family: Qwen2 and Mistral are Llama's shape (Qwen2 with q/k/v biases)
LLAMA_ARCHITECTURES = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"})
GPT2_ARCHITECTURES = frozenset({"GPT2LMHeadModel"})


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the forward pass and the cache are sized by."""

    family: str  # "llama" or "gpt2"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_positions: int
    norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    #: the dtype the weights were saved in (config ``torch_dtype`` / ``dtype``)
    dtype: str
    eos_token_ids: tuple[int, ...]
    activation: str


def read_shape(folder: Path) -> ModelShape:
    """The shape of the model in ``folder`` (its config.json and generation_config.json)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the model's config.json in {folder}: {exc}") from exc
    architectures = config.get("architectures") or []
    arch = architectures[0] if architectures else config.get("model_type", "")
    if arch in LLAMA_ARCHITECTURES:
        shape = _llama(config)
    elif arch in GPT2_ARCHITECTURES:
        shape = _gpt2(config)
    else:
        accepted = sorted(LLAMA_ARCHITECTURES | GPT2_ARCHITECTURES)
        raise ConfigError(f"model architecture '{arch}' is not served; expected one of {accepted}")
    return with_generation_config(shape, folder)


def _eos(config: dict[str, Any], folder_generation: dict[str, Any]) -> tuple[int, ...]:
    value = folder_generation.get("eos_token_id", config.get("eos_token_id"))
    if value is None:
        return ()
    return tuple(value) if isinstance(value, list) else (int(value),)


def _rope_theta(config: dict[str, Any]) -> float:
    scaling = config.get("rope_scaling") or {}
    parameters = config.get("rope_parameters") or {}
    kind = scaling.get("rope_type", scaling.get("type")) or parameters.get("rope_type", "default")
    if kind not in ("default", None):
        raise ConfigError(f"rope scaling '{kind}' is not supported yet (only the default RoPE)")
    return float(config.get("rope_theta", parameters.get("rope_theta", 10000.0)))


def _dtype(config: dict[str, Any]) -> str:
    return str(config.get("torch_dtype") or config.get("dtype") or "float32")


def _llama(config: dict[str, Any]) -> ModelShape:
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    if config.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"activation '{config.get('hidden_act')}' is not supported (silu)")
    return ModelShape(
        family="llama",
        vocab_size=int(config["vocab_size"]),
        hidden_size=hidden,
        num_layers=int(config["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
        intermediate_size=int(config["intermediate_size"]),
        max_positions=int(config.get("max_position_embeddings", 2048)),
        norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        rope_theta=_rope_theta(config),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        dtype=_dtype(config),
        eos_token_ids=_eos(config, {}),
        activation="silu",
    )


def _gpt2(config: dict[str, Any]) -> ModelShape:
    hidden = int(config["n_embd"])
    heads = int(config["n_head"])
    activation = config.get("activation_function", "gelu_new")
    if activation not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
        raise ConfigError(f"GPT-2 activation '{activation}' is not supported")
    if config.get("scale_attn_by_inverse_layer_idx") or config.get("reorder_and_upcast_attn"):
        raise ConfigError("GPT-2 attention scaling by layer index is not supported")
    return ModelShape(
        family="gpt2",
        vocab_size=int(config["vocab_size"]),
        hidden_size=hidden,
        num_layers=int(config["n_layer"]),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=hidden // heads,
        intermediate_size=int(config.get("n_inner") or 4 * hidden),
        max_positions=int(config.get("n_positions", 1024)),
        norm_eps=float(config.get("layer_norm_epsilon", 1e-5)),
        rope_theta=0.0,
        tie_word_embeddings=True,
        dtype=_dtype(config),
        eos_token_ids=_eos(config, {}),
        activation="gelu" if activation == "gelu" else "gelu_tanh",
    )


def with_generation_config(shape: ModelShape, folder: Path) -> ModelShape:
    """``shape`` with the end-of-sequence tokens of generation_config.json, where there is
    one (it names the tokens ``generate`` stops at, often more than config.json does)."""
    path = folder / "generation_config.json"
    if not path.exists():
        return shape
    try:
        generation = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    eos = _eos({"eos_token_id": list(shape.eos_token_ids)}, generation)
    return dataclasses.replace(shape, eos_token_ids=eos)
