"""digits_reader: a Python model that reads handwritten digits from raw image files.

Written as a TorchServe handler (only the import differs): ``preprocess`` decodes each
request's raw bytes — a binary PGM (``P5``) greyscale image of any size that is a multiple of
8x8 — into the 8x8 grid of 0..16 values the ``digits_mlp`` model expects; ``inference`` calls
that model in-process (``inferplex.handler.infer``, no network hop); ``postprocess`` answers
one JSON document per image. The build script copies this file to
``models/digits_reader/1/model.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferplex.handler import BaseHandler, infer


def decode_pgm(data: bytes) -> np.ndarray:
    """A binary PGM image as a (height, width) array of 0..1 floats."""
    fields = data.split(maxsplit=4)
    if len(fields) != 5 or fields[0] != b"P5":
        raise ValueError("expected a binary PGM image (P5 header)")
    width, height, maxval = int(fields[1]), int(fields[2]), int(fields[3])
    pixels = np.frombuffer(fields[4], dtype=np.uint8, count=width * height)
    return pixels.reshape(height, width).astype(np.float32) / maxval


class DigitsReader(BaseHandler):
    def preprocess(self, data: list[dict[str, Any]]) -> np.ndarray:
        grids = []
        for row in data:
            image = decode_pgm(row.get("data") or row.get("body"))
            height, width = image.shape
            if height % 8 or width % 8:
                raise ValueError(f"image is {width}x{height}; expected a multiple of 8x8")
            # average each block down to 8x8, scaled to the digits data's 0..16
            blocks = image.reshape(8, height // 8, 8, width // 8).mean(axis=(1, 3))
            grids.append(blocks.reshape(64) * 16.0)
        return np.stack(grids).astype(np.float32)

    def inference(self, data: np.ndarray) -> dict[str, np.ndarray]:
        return infer("digits_mlp", {"pixels": data}, ["probabilities", "label"])

    def postprocess(self, data: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        labels = data["label"].reshape(-1)
        return [
            {"digit": int(label), "confidence": round(float(probabilities[label]), 4)}
            for probabilities, label in zip(data["probabilities"], labels, strict=True)
        ]
