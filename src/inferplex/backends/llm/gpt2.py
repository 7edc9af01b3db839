"""The forward pass of GPT-2 (learned positions, LayerNorm, fused q/k/v, a GELU MLP, the head
tied to the token embeddings) over the paged cache, from the Hugging Face weights (whose
Conv1D layers keep their matrices transposed: [in, out])."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from inferplex.backends.llm.attention import LayerCache, StepInputs, paged_attention
from inferplex.backends.llm.shape import ModelShape
from inferplex.backends.llm.weights import Weights


@dataclass(frozen=True, slots=True)
class _Layer:
    ln1: tuple[torch.Tensor, torch.Tensor]
    qkv: tuple[torch.Tensor, torch.Tensor]
    out: tuple[torch.Tensor, torch.Tensor]
    ln2: tuple[torch.Tensor, torch.Tensor]
    fc: tuple[torch.Tensor, torch.Tensor]
    proj: tuple[torch.Tensor, torch.Tensor]


class Gpt2Model:
    """GPT-2's decoder stack and head."""

    def __init__(self, shape: ModelShape, tensors: dict[str, torch.Tensor]) -> None:
        weights = Weights(tensors, ("transformer.",))
        self.shape = shape
        self.wte = weights.get("wte.weight")
        self.wpe = weights.get("wpe.weight")
        self.ln_f = (weights.get("ln_f.weight"), weights.get("ln_f.bias"))
        self.layers = [self._layer(weights, i) for i in range(shape.num_layers)]
        self.scale = shape.head_dim**-0.5
        self._approximate = "tanh" if shape.activation == "gelu_tanh" else "none"

    @staticmethod
    def _layer(weights: Weights, index: int) -> _Layer:
        p = f"h.{index}."

        def linear(name: str) -> tuple[torch.Tensor, torch.Tensor]:
            # Conv1D's [in, out] made F.linear's [out, in] once, at load
            weight = weights.get(f"{p}{name}.weight").t().contiguous()
            return weight, weights.get(f"{p}{name}.bias")

        def norm(name: str) -> tuple[torch.Tensor, torch.Tensor]:
            return weights.get(f"{p}{name}.weight"), weights.get(f"{p}{name}.bias")

        return _Layer(
            ln1=norm("ln_1"),
            qkv=linear("attn.c_attn"),
            out=linear("attn.c_proj"),
            ln2=norm("ln_2"),
            fc=linear("mlp.c_fc"),
            proj=linear("mlp.c_proj"),
        )

    def forward(self, step: StepInputs, caches: list[LayerCache]) -> torch.Tensor:
        """Logits (float32) of the tokens at ``step.logits_rows``."""
        batch, positions = step.attention, step.positions
        shape = self.shape
        eps = shape.norm_eps
        hidden = F.embedding(step.input_ids, self.wte) + F.embedding(positions, self.wpe)
        tokens = hidden.shape[0]
        heads = (tokens, shape.num_heads, shape.head_dim)
        for layer, cache in zip(self.layers, caches, strict=True):
            x = F.layer_norm(hidden, (shape.hidden_size,), *layer.ln1, eps)
            q, k, v = F.linear(x, *layer.qkv).chunk(3, dim=-1)
            attended = paged_attention(
                q.reshape(heads), k.reshape(heads), v.reshape(heads), cache, batch, self.scale
            )
            hidden = hidden + F.linear(attended, *layer.out)
            x = F.layer_norm(hidden, (shape.hidden_size,), *layer.ln2, eps)
            x = F.gelu(F.linear(x, *layer.fc), approximate=self._approximate)
            hidden = hidden + F.linear(x, *layer.proj)
        last = F.layer_norm(hidden[step.logits_rows], (shape.hidden_size,), *self.ln_f, eps)
        return F.linear(last, self.wte).float()
