"""Build a small LLM model folder with random weights, offline, for tests and trials.

    python -m examples.build_llm OUT [--family llama|gpt2] [--hidden 64] [--layers 2]
                                     [--heads 4] [--kv-heads 2] [--vocab 512] [--seed 0]
                                     [--intermediate N] [--reference]

``--reference`` builds the vLLM comparison's model (bench/llm_vs_vllm.py): a Llama of hidden
512, 8 layers, 8 heads / 4 KV heads, intermediate 1408, vocab 16000 (40M parameters).

Writes ``OUT/<name>/1/`` (config.json, model.safetensors, generation_config.json, tokenizer
files with a ChatML chat template) and ``OUT/<name>/config.pbtxt`` (``backend: "llm"``).
The tokenizer is a byte-level BPE trained in seconds on the project's own docs/*.md; the
weights come from ``transformers`` (a LlamaConfig or GPT2Config) with a fixed seed. Needs
torch, transformers and tokenizers; no network.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: ChatML, as Qwen's templates write it; a message's content may be a list of text parts
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{{ part['text'] }}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
DOCS = Path(__file__).resolve().parent.parent / "docs"
#: the reference model's MLP width: 40M parameters in all, as the issue's vLLM figures
REFERENCE_INTERMEDIATE = 1408


def train_tokenizer(vocab_size: int) -> object:
    """A byte-level BPE tokenizer trained on the project's docs (a PreTrainedTokenizerFast)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [path.read_text() for path in sorted(DOCS.glob("*.md"))]
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def build_llm(
    out: Path,
    name: str,
    family: str = "llama",
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    vocab: int = 512,
    max_positions: int = 512,
    seed: int = 0,
    parameters: dict[str, str] | None = None,
    intermediate: int = 0,
) -> Path:
    """The version folder of a new model ``out/name`` (see the module docstring);
    ``intermediate``: a Llama's MLP width (0: twice ``hidden``)."""
    import torch
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedModel,
    )

    tokenizer = train_tokenizer(vocab)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")  # type: ignore[attr-defined]
    torch.manual_seed(seed)
    if family == "llama":
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=intermediate or hidden * 2,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            max_position_embeddings=max_positions,
            eos_token_id=eos,
            bos_token_id=0,
            tie_word_embeddings=False,
            # wider than the default 0.02: peaked logits, so greedy choices are clear-cut
            initializer_range=0.2,
        )
        model: PreTrainedModel = LlamaForCausalLM(config)
    elif family == "gpt2":
        gpt2 = GPT2Config(
            vocab_size=vocab,
            n_embd=hidden,
            n_layer=layers,
            n_head=heads,
            n_positions=max_positions,
            eos_token_id=eos,
            bos_token_id=eos,
            initializer_range=0.2,
        )
        model = GPT2LMHeadModel(gpt2)
    else:
        raise ValueError(f"family must be llama or gpt2, got {family!r}")
    version = out / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(version)
    tokenizer.save_pretrained(version)  # type: ignore[attr-defined]
    _for_older_readers(version)
    lines = ['backend: "llm"']
    for key, value in (parameters or {}).items():
        lines.append(f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}')
    (out / name / "config.pbtxt").write_text("\n".join(lines) + "\n")
    return version


def _for_older_readers(version: Path) -> None:
    """transformers 5 writes a tokenizer class and a rope layout that vLLM and older
    readers do not know: the class they know, rope_theta at the top level."""
    config_path = version / "config.json"
    config = json.loads(config_path.read_text())
    rope = config.get("rope_parameters") or {}
    if "rope_theta" in rope and "rope_theta" not in config:
        config["rope_theta"] = rope["rope_theta"]
        config_path.write_text(json.dumps(config, indent=2))
    tokenizer_path = version / "tokenizer_config.json"
    tokenizer_config = json.loads(tokenizer_path.read_text())
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    tokenizer_path.write_text(json.dumps(tokenizer_config, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--name", default="")
    parser.add_argument("--family", default="llama", choices=["llama", "gpt2"])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--max-positions", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--intermediate", type=int, default=0)
    parser.add_argument("--reference", action="store_true", help="the vLLM comparison's size")
    args = parser.parse_args()
    if args.reference:
        args.family, args.hidden, args.layers, args.heads = "llama", 512, 8, 8
        args.kv_heads, args.vocab, args.intermediate = 4, 16000, REFERENCE_INTERMEDIATE
    version = build_llm(
        args.out,
        args.name or f"tiny_{args.family}",
        args.family,
        args.hidden,
        args.layers,
        args.heads,
        args.kv_heads,
        args.vocab,
        args.max_positions,
        args.seed,
        intermediate=args.intermediate,
    )
    print(f"built {version}")


if __name__ == "__main__":
    main()
