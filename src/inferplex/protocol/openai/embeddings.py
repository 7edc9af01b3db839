"""``/v1/embeddings``: texts (or token ids) in, one vector per input out.

A model answers it when its config marks the output that holds one vector per input, with
the parameter ``openai_embedding`` (its value: the output's name). The texts go in as the
model takes them: as a BYTES input (a model that tokenises them itself), or tokenised with
the model folder's ``tokenizer.json`` into ``input_ids`` and, where declared,
``attention_mask`` and ``token_type_ids`` (INT64 or INT32, padded to the longest input of
the request). A batching model gets requests of at most ``max_batch_size`` inputs, sent
together, so the dynamic batcher may join them with other clients'. ``dimensions`` below the
model's size needs the parameter ``openai_matryoshka: "true"`` (the vector is cut and made
unit length again)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.datatypes import V2_TO_NUMPY
from inferplex.protocol.openai import fields as f
from inferplex.protocol.openai.errors import FieldError
from inferplex.protocol.openai.text_model import TextModel
from inferplex.types import InferenceRequest, InferenceResponse, Tensor

EMBEDDING_PARAMETER = "openai_embedding"
MATRYOSHKA_PARAMETER = "openai_matryoshka"
_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})
_TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(slots=True)
class EmbeddingRequest:
    model: str
    inputs: list[str | list[int]]
    encoding_format: str = "float"
    dimensions: int | None = None


@dataclass(slots=True)
class EmbeddingPlan:
    """The model requests of one embedding request, and what the answer needs."""

    request: EmbeddingRequest
    output: str
    requests: list[InferenceRequest]
    prompt_tokens: int
    size: int  # the model's vector size (0: not declared)
    matryoshka: bool


def read_embedding(body: f.Body, max_inputs: int) -> EmbeddingRequest:
    fields = f.parse_body(body, "embedding")
    f.unknown(fields, _FIELDS, "embeddings")
    model = f.text(fields, "model", required=True)
    assert model is not None
    inputs = _inputs(fields.get("input"))
    if len(inputs) > max_inputs:
        raise FieldError(
            "input",
            f"'input' may hold at most {max_inputs} inputs (the server's "
            f"--openai-max-embedding-inputs), got {len(inputs)}",
        )
    encoding = f.text(fields, "encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise FieldError(
            "encoding_format", f"'encoding_format' must be float or base64, got {encoding!r}"
        )
    dimensions = f.integer(fields, "dimensions", 1)
    f.text(fields, "user")
    return EmbeddingRequest(model, inputs, encoding, dimensions)


def _inputs(value: Any) -> list[str | list[int]]:
    one_ids = isinstance(value, list) and bool(value) and all(_is_id(v) for v in value)
    if isinstance(value, str) or one_ids:
        value = [value]
    if not isinstance(value, list) or not value:
        raise f.kind_error("input", "a string or a non-empty array of strings or token ids", value)
    for index, item in enumerate(value):
        if isinstance(item, str):
            if not item:
                raise FieldError(f"input[{index}]", f"'input[{index}]' is an empty string")
        elif not (isinstance(item, list) and item and all(_is_id(v) for v in item)):
            raise f.kind_error(f"input[{index}]", "a non-empty string or array of token ids", item)
    return list(value)


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def plan_embedding(
    request: EmbeddingRequest, config: ModelConfig, text_model: TextModel
) -> EmbeddingPlan:
    """The model's requests for ``request`` (in a worker thread for a large one)."""
    output = config.parameters.get(EMBEDDING_PARAMETER, "")
    spec = next((t for t in config.output if t.name == output), None)
    if spec is None:
        raise FieldError(
            "model",
            f"model '{config.name}' is not an embedding model: its config marks no embedding "
            f"output (parameter '{EMBEDDING_PARAMETER}' naming an output)",
        )
    inputs = {t.name: t for t in config.input}
    size = spec.dims[-1] if spec.dims and spec.dims[-1] > 0 else 0
    matryoshka = config.parameters.get(MATRYOSHKA_PARAMETER, "").lower() == "true"
    _check_dimensions(request, config.name, size, matryoshka)
    rows = config.max_batch_size if config.batched else len(request.inputs)
    chunks = [request.inputs[i : i + rows] for i in range(0, len(request.inputs), rows)]
    texts = [t for t in config.input if t.data_type == "BYTES"]
    requests: list[InferenceRequest] = []
    tokens = 0
    for number, chunk in enumerate(chunks):
        if len(texts) == 1 and len(inputs) == 1:
            tensors, counted = _text_tensors(texts[0], config, chunk, text_model)
        else:
            tensors, counted = _token_tensors(inputs, config, chunk, text_model, number * rows)
        tokens += counted
        requests.append(InferenceRequest(config.name, tensors, id=f"embd-{number}"))
    return EmbeddingPlan(request, output, requests, tokens, size, matryoshka)


def _check_dimensions(request: EmbeddingRequest, model: str, size: int, matryoshka: bool) -> None:
    wanted = request.dimensions
    if wanted is None or wanted == size:
        return
    if not matryoshka:
        raise FieldError(
            "dimensions",
            f"model '{model}' gives vectors of {size or 'its own'} dimensions and does not take "
            f"'dimensions' {wanted} (its config has no parameter '{MATRYOSHKA_PARAMETER}')",
        )
    if size and wanted > size:
        raise FieldError(
            "dimensions", f"'dimensions' must be at most {size} for model '{model}', got {wanted}"
        )


def _text_tensors(
    spec: TensorConfig, config: ModelConfig, chunk: list[str | list[int]], text_model: TextModel
) -> tuple[list[Tensor], int]:
    texts = []
    for item in chunk:
        if not isinstance(item, str):
            raise FieldError("input", f"model '{config.name}' takes text, not token ids")
        texts.append(item.encode("utf-8"))
    shape = (len(texts), 1) if config.batched else (len(texts),)
    data = np.array(texts, dtype=object).reshape(shape)
    counted = sum(text_model.count(t.decode()) or len(t.split()) for t in texts)
    return [Tensor(spec.name, "BYTES", data.shape, data)], counted


def _token_tensors(
    inputs: dict[str, TensorConfig],
    config: ModelConfig,
    chunk: list[str | list[int]],
    text_model: TextModel,
    start: int,
) -> tuple[list[Tensor], int]:
    if "input_ids" not in inputs:
        raise FieldError(
            "model",
            f"model '{config.name}' takes neither one BYTES input nor 'input_ids': the server "
            "cannot give it text",
        )
    ids = [_ids(item, i, config.name, text_model) for i, item in enumerate(chunk)]
    limit = text_model.context_length
    for index, row in enumerate(ids, start):
        if limit is not None and len(row) > limit:
            raise FieldError(
                f"input[{index}]",
                f"model '{config.name}' takes at most {limit} tokens per input; input {index} "
                f"has {len(row)}",
                "context_length_exceeded",
            )
    width = max(len(row) for row in ids)
    matrix = np.zeros((len(ids), width), np.int64)
    mask = np.zeros((len(ids), width), np.int64)
    for line, found in enumerate(ids):
        matrix[line, : len(found)] = found
        mask[line, : len(found)] = 1
    values = {"input_ids": matrix, "attention_mask": mask, "token_type_ids": np.zeros_like(matrix)}
    tensors = []
    for name in _TOKEN_INPUTS:
        spec = inputs.get(name)
        if spec is not None:
            data = values[name].astype(V2_TO_NUMPY[spec.data_type])
            tensors.append(Tensor(name, spec.data_type, data.shape, data))
    return tensors, int(mask.sum())


def _ids(item: str | list[int], index: int, model: str, text_model: TextModel) -> list[int]:
    if not isinstance(item, str):
        return item
    if text_model.tokenizer is None:
        raise FieldError(
            "model", f"model '{model}' takes token ids and its folder has no tokenizer.json"
        )
    return list(text_model.tokenizer.encode(item).ids)


def vectors_of(plan: EmbeddingPlan, response: InferenceResponse) -> np.ndarray:
    """The vectors of one of the plan's requests (float32, one row per input)."""
    found = next((t for t in response.outputs if t.name == plan.output), None)
    if found is None:
        raise FieldError("model", f"model '{plan.request.model}' sent no output '{plan.output}'")
    data = np.asarray(found.data, np.float32)
    return data.reshape(data.shape[0], -1)


def embedding_answer(plan: EmbeddingPlan, parts: list[np.ndarray]) -> dict[str, Any]:
    """OpenAI's embedding list of the vectors of the plan's requests, in input order."""
    wanted = plan.request.dimensions
    items = []
    for index, vector in enumerate(v for part in parts for v in part):
        if wanted is not None and wanted < vector.shape[0]:
            vector = vector[:wanted]
            norm = float(np.linalg.norm(vector))
            vector = vector / norm if norm else vector
        items.append({"object": "embedding", "index": index, "embedding": _encoded(vector, plan)})
    tokens = plan.prompt_tokens
    return {
        "object": "list",
        "data": items,
        "model": plan.request.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _encoded(vector: np.ndarray, plan: EmbeddingPlan) -> list[float] | str:
    if plan.request.encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return list(vector.tolist())
