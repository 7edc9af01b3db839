"""Tokenizer files for the generative test models, made without a download: a word-level
``tokenizer.json`` (``tokenizers``; words split at whitespace and punctuation, so a text's
tokens are its words and marks), a ``tokenizer_config.json`` with special tokens and a
ChatML chat template, and a ``config.json`` giving the context length
(``max_position_embeddings``), as a Hugging Face model folder has them."""

from __future__ import annotations

import json
from pathlib import Path

#: the words the models know (anything else is <unk>)
_TEXT = (
    "the a an and or of to in on at by for with from is are was be it this that "
    "hello world tokens come one by stream model server answer question chat "
    "what how why who where when you me we they he she say says said tell "
    "red green blue small large fast slow north south east west day night "
    "cat dog bird fish tree river stone cloud sun moon star light dark "
    "user assistant system developer"
)
WORDS = tuple(_TEXT.split(" "))
SPECIAL = ("<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "[CLS]", "[SEP]", "[PAD]")
MARKS = tuple(".,!?:;'\"()-")

#: ChatML, as Qwen's and many small models' templates write it
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def vocabulary() -> dict[str, int]:
    tokens = [*SPECIAL, *MARKS, *WORDS, "\n"]
    return {token: index for index, token in enumerate(dict.fromkeys(tokens))}


def write_tokenizer(
    folder: Path,
    context_length: int,
    template: str | None = CHATML,
    sentence_marks: bool = False,
) -> None:
    """``tokenizer.json``, ``tokenizer_config.json`` and ``config.json`` in ``folder``;
    ``sentence_marks`` wraps each encoded text in [CLS] ... [SEP] (a BERT-style encoder)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    vocab = vocabulary()
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tokenizer.add_special_tokens(list(SPECIAL))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    if sentence_marks:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    settings: dict[str, object] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "<|im_end|>",
        "unk_token": "<unk>",
        "pad_token": "[PAD]",
        "model_max_length": context_length,
    }
    if template is not None:
        settings["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=2))
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": context_length}))
