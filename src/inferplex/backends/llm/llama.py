"""The forward pass of the Llama family (Llama, Mistral, Qwen2: RMSNorm, rotary positions,
grouped-query attention, a SiLU-gated MLP) over the paged cache, from the Hugging Face
weights; q/k/v and gate/up are fused into one matrix each."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from inferplex.backends.llm.attention import LayerCache, StepInputs, paged_attention
from inferplex.backends.llm.shape import ModelShape
from inferplex.backends.llm.weights import Weights


@dataclass(frozen=True, slots=True)
class _Layer:
    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    out: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor


class LlamaModel:
    """Llama's decoder stack and head."""

    def __init__(self, shape: ModelShape, tensors: dict[str, torch.Tensor]) -> None:
        weights = Weights(tensors, ("model.",))
        self.shape = shape
        self.embed = weights.get("embed_tokens.weight")
        self.norm = weights.get("norm.weight")
        head = weights.optional("lm_head.weight")
        self.head = self.embed if head is None or shape.tie_word_embeddings else head
        self.layers = [self._layer(weights, i) for i in range(shape.num_layers)]
        self.scale = shape.head_dim**-0.5
        self._q = shape.num_heads * shape.head_dim
        self._kv = shape.num_kv_heads * shape.head_dim
        self._rope = _rope_table(shape, self.embed.device, self.embed.dtype)

    @staticmethod
    def _layer(weights: Weights, index: int) -> _Layer:
        p = f"layers.{index}."
        attn = [weights.get(f"{p}self_attn.{n}_proj.weight") for n in "qkv"]
        biases = [weights.optional(f"{p}self_attn.{n}_proj.bias") for n in "qkv"]
        bias = None
        if all(b is not None for b in biases):
            bias = torch.cat([b for b in biases if b is not None])
        return _Layer(
            input_norm=weights.get(f"{p}input_layernorm.weight"),
            qkv=torch.cat(attn),
            qkv_bias=bias,
            out=weights.get(f"{p}self_attn.o_proj.weight"),
            post_norm=weights.get(f"{p}post_attention_layernorm.weight"),
            gate_up=torch.cat(
                [weights.get(f"{p}mlp.gate_proj.weight"), weights.get(f"{p}mlp.up_proj.weight")]
            ),
            down=weights.get(f"{p}mlp.down_proj.weight"),
        )

    def forward(self, step: StepInputs, caches: list[LayerCache]) -> torch.Tensor:
        """Logits (float32) of the tokens at ``step.logits_rows``."""
        batch, positions = step.attention, step.positions
        shape = self.shape
        eps = shape.norm_eps
        cos, sin = self._rope[0][positions], self._rope[1][positions]
        hidden = F.embedding(step.input_ids, self.embed)
        tokens = hidden.shape[0]
        for layer, cache in zip(self.layers, caches, strict=True):
            x = _rms_norm(hidden, layer.input_norm, eps)
            qkv = F.linear(x, layer.qkv, layer.qkv_bias)
            q, k, v = qkv.split((self._q, self._kv, self._kv), dim=-1)
            q = _rotate(q.view(tokens, shape.num_heads, shape.head_dim), cos, sin)
            k = _rotate(k.view(tokens, shape.num_kv_heads, shape.head_dim), cos, sin)
            v = v.view(tokens, shape.num_kv_heads, shape.head_dim)
            attended = paged_attention(q, k, v, cache, batch, self.scale)
            hidden = hidden + F.linear(attended, layer.out)
            x = _rms_norm(hidden, layer.post_norm, eps)
            gate, up = F.linear(x, layer.gate_up).chunk(2, dim=-1)
            hidden = hidden + F.linear(F.silu(gate) * up, layer.down)
        last = _rms_norm(hidden[step.logits_rows], self.norm, eps)
        return F.linear(last, self.head).float()


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # in float32, as Hugging Face's LlamaRMSNorm, then back to the weights' dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def _rope_table(
    shape: ModelShape, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position, [positions, head dim] (computed in float32)."""
    dim = shape.head_dim
    inv_freq = 1.0 / (
        shape.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float().to(device) / dim)
    )
    positions = torch.arange(shape.max_positions, device=device).float()
    freqs = torch.outer(positions, inv_freq)
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions, Hugging Face's half-split layout; x [tokens, heads, dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)
