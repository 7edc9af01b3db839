"""What the OpenAI codecs read of the served models: a model's (or route's) configuration,
and its tokenizer, chat template and context length (``text_model.py``), read once per loaded
configuration (a reload brings a new one) and kept for the next requests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from inferplex.config.model_config import ModelConfig
from inferplex.protocol.openai.text_model import TextModel, read_text_model
from inferplex.shm.registry import ReadOffLoop

__all__ = ["Configs", "TextModels"]

#: the text models kept read, by model; the oldest goes first
_KEPT = 64


class Configs(Protocol):
    """Where configurations come from (the engine: a route's is its first target's)."""

    def model_config(self, name: str, version: str = "") -> ModelConfig: ...


class TextModels:
    """The configurations and text models of the models the API serves; read by the codecs'
    ``decode``, on the event loop or in a worker thread."""

    def __init__(
        self,
        configs: Configs,
        source: Callable[[str], str],
        folder: Callable[[str], Path | None],
    ) -> None:
        """``source``: the model whose files serve a name (a route's first target; a model
        itself); ``folder``: where a model's files are (None: not known)."""
        self._configs = configs
        self._source = source
        self._folder = folder
        self._kept: dict[str, tuple[ModelConfig, TextModel]] = {}
        self._lock = threading.Lock()  # decodes run in worker threads too

    def config(self, name: str) -> ModelConfig:
        """The model's (or route's) configuration; ModelNotFoundError (404) for none."""
        return self._configs.model_config(name)

    def text_model(self, name: str, config: ModelConfig, on_loop: bool) -> TextModel:
        """The model's text model, read from its files if this configuration's is not kept:
        on the event loop (``on_loop``) that raises ReadOffLoop, so the data plane decodes
        the call in a worker thread (reading a tokenizer takes milliseconds or more)."""
        source = self._source(name)
        if source != name:  # a route: its target's config is the one loaded (a route's is a copy)
            config = self._configs.model_config(source)
        kept = self._kept.get(source)
        if kept is not None and kept[0] is config:
            return kept[1]
        if on_loop:
            raise ReadOffLoop
        context = config.parameters.get("context_length")
        found = read_text_model(self._folder(source), context)
        with self._lock:
            if len(self._kept) >= _KEPT and source not in self._kept:
                del self._kept[next(iter(self._kept))]
            self._kept[source] = (config, found)
        return found
