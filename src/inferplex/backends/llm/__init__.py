"""The LLM engine and its backend (docs/llm.md): continuous batching over a paged KV cache
for Hugging Face causal LMs (the Llama and GPT-2 families) in PyTorch.

Pure parts (no torch): ``blocks`` (the block pool and prefix cache), ``policy`` (what each
step runs), ``params`` (sampling settings), ``text`` (incremental detokenisation, stop
strings), ``settings``, ``request``. The model side: ``shape``, ``weights``, ``llama``,
``gpt2``, ``attention``, ``kv_cache``, ``runner``, ``sampler``; the loop: ``generation``,
``engine``, ``admission``, ``loading``; the server side: ``relay``, ``backend``, ``chat``
(chat templates, for the OpenAI frontend).
"""

from inferplex.backends.llm.backend import LlmBackend

__all__ = ["LlmBackend"]
