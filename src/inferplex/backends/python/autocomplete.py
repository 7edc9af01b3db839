"""The short-lived process that runs a Triton Python model's ``auto_complete_config`` when the
server loads it (``completion.py`` starts it), as Triton runs it in a stub process of its own:
the model's module is imported, the static method called with the config as
``pb_utils.ModelConfig``, and the process exits; nothing it made reaches the instances.

    python -m inferplex.backends.python.autocomplete   < {"model_file", "config", "handler_class"}

It answers one JSON object on its standard output, ``{"config": {...}}`` (Triton's JSON
names) or ``{"error": "..."}``; what the model prints goes to standard error (the server's).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from inferplex.backends.python.runner import find_class, load_module
from inferplex.backends.python.worker import describe
from inferplex.handler.triton_config import ModelConfig


def complete(request: dict[str, Any]) -> dict[str, Any]:
    """The completed config, as the model's ``auto_complete_config`` leaves it."""
    model_file = Path(request["model_file"])
    cls = find_class(load_module(model_file), request["handler_class"])
    config = ModelConfig(request["config"])
    method = getattr(cls, "auto_complete_config", None)
    if method is None:
        return config.as_dict()
    returned = method(config)
    if not isinstance(returned, ModelConfig):
        raise TypeError(
            "auto_complete_config must return the pb_utils.ModelConfig it was given, got "
            f"{type(returned).__name__}"
        )
    return returned.as_dict()


def main() -> int:
    request = json.load(sys.stdin)
    answer_to = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the model's prints go to the server's log, not into the answer
    answer: dict[str, Any]
    try:
        answer = {"config": complete(request)}
    except Exception as exc:
        answer = {"error": describe(exc, str(Path(request["model_file"]).parent))}
    with answer_to:
        json.dump(answer, answer_to)
    return 0


if __name__ == "__main__":
    sys.exit(main())
