"""Tiny LLM model folders for the tests (examples/build_llm.py: hidden 64, 2 layers, a BPE
tokenizer trained on the project's docs), built once per test session into a folder of
their own."""

from __future__ import annotations

from pathlib import Path

import pytest

FAMILIES = ("llama", "gpt2")


def tiny_llm_repository(factory: pytest.TempPathFactory, kv_cache_bytes: int = 1 << 22) -> Path:
    """A repository with ``tiny_llama`` and ``tiny_gpt2`` (config.pbtxt: backend llm, a KV
    cache of ``kv_cache_bytes``)."""
    pytest.importorskip("transformers")
    from examples.build_llm import build_llm

    out = factory.mktemp("llm_models")
    for family in FAMILIES:
        build_llm(out, f"tiny_{family}", family, parameters={"kv_cache_bytes": str(kv_cache_bytes)})
    return out
