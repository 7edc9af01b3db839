"""The model folder's tokenizer (``tokenizer.json``, read by the ``tokenizers`` library:
no transformers at run time)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from inferplex.errors import ConfigError


class TextTokenizer:
    """Text to token ids and back."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        path = folder / "tokenizer.json"
        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:
            raise ConfigError(f"cannot read the tokenizer {path}: {exc}") from exc

    def encode(self, text: str) -> list[int]:
        """The prompt's tokens, with the special tokens the tokenizer adds (a BOS)."""
        return list(self._tokenizer.encode(text, add_special_tokens=True).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))
