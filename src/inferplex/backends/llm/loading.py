"""Loading a model folder into a running engine: its shape, weights, tokenizer, a KV cache
under the byte budget, the policy over its blocks and the engine thread."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from inferplex.backends.llm.blocks import BlockPool
from inferplex.backends.llm.engine import Engine
from inferplex.backends.llm.gpt2 import Gpt2Model
from inferplex.backends.llm.kv_cache import KvCache
from inferplex.backends.llm.llama import LlamaModel
from inferplex.backends.llm.policy import SchedulingPolicy
from inferplex.backends.llm.runner import CausalModel, ModelRunner
from inferplex.backends.llm.settings import EngineSettings
from inferplex.backends.llm.shape import ModelShape, read_shape
from inferplex.backends.llm.tokenizer import TextTokenizer
from inferplex.backends.llm.weights import load_weights
from inferplex.backends.step_gate import StepGate
from inferplex.errors import ConfigError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class LoadedModel:
    """A served LLM: its engine and what requests are checked and encoded against."""

    engine: Engine
    tokenizer: TextTokenizer
    shape: ModelShape
    settings: EngineSettings
    #: the longest prompt + output served
    max_model_len: int


def engine_dtype(shape: ModelShape, setting: str, device: torch.device) -> torch.dtype:
    """The dtype the weights and cache are kept in ("auto": the checkpoint's, float16 made
    bfloat16 on a CPU, where float16 matrix products are slow)."""
    name = shape.dtype if setting == "auto" else setting
    dtype = _DTYPES.get(name)
    if dtype is None:
        raise ConfigError(f"the checkpoint's dtype '{name}' is not served; set parameter dtype")
    if dtype == torch.float16 and device.type == "cpu" and setting == "auto":
        return torch.bfloat16
    return dtype


def build_model(
    shape: ModelShape, folder: Path, device: torch.device, dtype: torch.dtype
) -> CausalModel:
    """The forward pass of the folder's weights."""
    tensors = load_weights(folder, device, dtype)
    if shape.family == "gpt2":
        return Gpt2Model(shape, tensors)
    return LlamaModel(shape, tensors)


def load_model(
    folder: Path,
    settings: EngineSettings,
    device: torch.device,
    threads: int,
    start: bool = True,
    gate: StepGate | None = None,
) -> LoadedModel:
    """The folder's model served by a new engine (its thread started, unless ``start`` is
    False: then the caller runs its steps); ``gate`` grants its loop's steps compute slots."""
    shape = read_shape(folder)
    dtype = engine_dtype(shape, settings.dtype, device)
    tokenizer = TextTokenizer(folder)
    model = build_model(shape, folder, device, dtype)
    cache = KvCache(shape, settings.kv_cache_bytes, settings.block_size, dtype, device)
    pool = BlockPool(cache.num_blocks, settings.block_size, settings.enable_prefix_caching)
    policy = SchedulingPolicy(pool, settings.max_num_batched_tokens, settings.max_num_seqs)
    max_len = shape.max_positions
    if settings.max_model_len:
        if settings.max_model_len > shape.max_positions:
            raise ConfigError(
                f"parameter max_model_len ({settings.max_model_len}) is above the model's "
                f"{shape.max_positions} positions"
            )
        max_len = settings.max_model_len
    engine = Engine(ModelRunner(model, cache, device), policy, settings.threads or threads, gate)
    if start:
        engine.start()
    return LoadedModel(engine, tokenizer, shape, settings, max_len)
