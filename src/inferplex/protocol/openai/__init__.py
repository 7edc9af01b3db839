"""The OpenAI-compatible API as a codec (docs/openai.md): OpenAI JSON in, InferenceRequests
for Triton-style LLM models (``text_input`` in, ``text_output`` streamed) and embedding
models; their responses out as OpenAI JSON or server-sent events. Pure functions and small
types: the HTTP glue is ``frontends/http_openai.py``."""
