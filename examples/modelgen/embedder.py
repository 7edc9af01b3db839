"""A small sentence encoder for the OpenAI API's ``/v1/embeddings`` (docs/openai.md):
``input_ids`` and ``attention_mask`` (INT64 ``[-1, -1]``) -> ``embedding`` (FP32
``[-1, size]``), each token's row of a fixed random table averaged over the mask and made
unit length (the pooling sentence-transformers applies to a BERT's token states), with the
word-level tokenizer of :mod:`examples.modelgen.text` ([CLS] ... [SEP]) in its folder and the
config marking its embedding output (``openai_embedding``), batched by the dynamic batcher."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import helper

from examples.modelgen.configs import model_config
from examples.modelgen.onnxfile import const, save, value_info
from examples.modelgen.text import vocabulary, write_tokenizer
from inferplex.config.writers import write_config


def sentence_encoder(
    repo: Path,
    name: str = "encoder",
    size: int = 16,
    context_length: int = 32,
    max_batch_size: int = 8,
    matryoshka: bool = False,
) -> Path:
    """The model, its config and tokenizer files; returns its folder."""
    table = np.random.default_rng(7).standard_normal((len(vocabulary()), size)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["states"]),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=1),
        helper.make_node("Unsqueeze", ["mask_f", "last"], ["mask3"]),
        helper.make_node("Mul", ["states", "mask3"], ["kept"]),
        helper.make_node("ReduceSum", ["kept", "tokens_axis"], ["summed"], keepdims=0),
        helper.make_node("ReduceSum", ["mask3", "tokens_axis"], ["counts"], keepdims=0),
        helper.make_node("Max", ["counts", "tiny"], ["safe"]),
        helper.make_node("Div", ["summed", "safe"], ["mean"]),
        helper.make_node("LpNormalization", ["mean"], ["embedding"], axis=-1, p=2),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [
            value_info("input_ids", "INT64", ["batch", "tokens"]),
            value_info("attention_mask", "INT64", ["batch", "tokens"]),
        ],
        [value_info("embedding", "FP32", ["batch", size])],
        [
            const("table", table),
            const("last", np.array([-1], np.int64)),
            const("tokens_axis", np.array([1], np.int64)),
            const("tiny", np.array([1e-9], np.float32)),
        ],
    )
    path = save(graph, repo, name, 1)
    config = model_config(path, max_batch_size=max_batch_size, dynamic_batching=True)
    config["parameters"] = {"openai_embedding": {"string_value": "embedding"}}
    if matryoshka:
        config["parameters"]["openai_matryoshka"] = {"string_value": "true"}
    folder = repo / name
    write_config(folder, config)
    write_tokenizer(folder, context_length, template=None, sentence_marks=True)
    return folder
