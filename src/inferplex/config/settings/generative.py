"""Bounds of the generative APIs: the OpenAI-compatible endpoints (docs/openai.md,
docs/security.md)."""

from __future__ import annotations

from pydantic import Field

from inferplex.config.settings.section import SettingsSection


class GenerativeSettings(SettingsSection):
    """How much one OpenAI-compatible request may ask for."""

    openai_max_choices: int = Field(
        default=16,
        ge=1,
        description="choices one OpenAI chat or completion request may ask for ('n'); each is "
        "one request to the model. Above it: 400 naming 'n'",
    )
    openai_max_embedding_inputs: int = Field(
        default=2048,
        ge=1,
        description="inputs one /v1/embeddings request may hold (OpenAI's own cap); above it: "
        "400 naming 'input'",
    )
