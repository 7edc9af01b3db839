"""Two convolution networks for ``inferplex optimize`` and ``bench/quantize.py``, built with
torch and exported to ONNX.

    python -m examples.export_cnns [--out DIR]       (from the repository root; default:
                                                     examples/models)

- ``digits_cnn``: a small CNN trained on scikit-learn's bundled 8x8 digits, upscaled to 32x32
  (``image`` FP32 ``[-1, 1, 32, 32]``, pixel values 0..1 -> ``logits`` FP32 ``[-1, 10]``).
  A quarter of the data is held out as the test split.
- ``resnet18``: the ResNet-18 layout (basic blocks 2-2-2-2, widths 64-512) at 224x224 with
  seeded random weights; its batch-norm statistics are gathered on random images so the
  activations stay in range, then folded into the convolutions at export.

Needs torch (the ``optimize-examples`` extra) and scikit-learn.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from examples import modelgen
from inferplex.config.writers import write_config

if TYPE_CHECKING:
    import torch

DEFAULT_OUT = Path(__file__).resolve().parent / "models"
DIGITS_SIZE = 32


@dataclass(frozen=True)
class DigitsSplit:
    """The upscaled digits: training rows (also the calibration source) and the test split."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


def digits_split(seed: int = 0) -> DigitsSplit:
    """scikit-learn's digits as FP32 ``[N, 1, 32, 32]`` images in 0..1, 75/25 stratified."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    features, labels = load_digits(return_X_y=True)
    small = torch.from_numpy(features.astype(np.float32).reshape(-1, 1, 8, 8) / 16.0)
    images = torch.nn.functional.interpolate(
        small, size=(DIGITS_SIZE, DIGITS_SIZE), mode="bilinear", align_corners=False
    ).numpy()
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=0.25, random_state=seed, stratify=labels
    )
    return DigitsSplit(x_train, y_train.astype(np.int64), x_test, y_test.astype(np.int64))


def train_digits_cnn(
    repo: Path, name: str = "digits_cnn", version: int = 1, epochs: int = 3, seed: int = 0
) -> tuple[Path, DigitsSplit, float]:
    """Train, export and configure the digits CNN; returns its path, the data and the test
    accuracy torch measured."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    data = digits_split(seed)
    # Wide enough that the convolutions, not per-node overhead, dominate at batch 32 (INT8
    # gains nothing on 16-32-64 channels: measured 0.7-0.9x on the development machine).
    network = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 128, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(128, 128, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(128 * (DIGITS_SIZE // 8) ** 2, 10),
    )
    optimizer = torch.optim.Adam(network.parameters(), lr=3e-3)
    images = torch.from_numpy(data.train_images)
    labels = torch.from_numpy(data.train_labels)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        network.train()
        for batch in torch.randperm(len(images), generator=generator).split(64):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(network(images[batch]), labels[batch])
            loss.backward()
            optimizer.step()
    network.eval()
    with torch.inference_mode():
        predicted = network(torch.from_numpy(data.test_images)).argmax(1).numpy()
    accuracy = float(np.mean(predicted == data.test_labels))
    path = _export(network, repo, name, version, (1, 1, DIGITS_SIZE, DIGITS_SIZE))
    return path, data, accuracy


def resnet18(
    repo: Path, name: str = "resnet18", version: int = 1, image_size: int = 224, seed: int = 0
) -> Path:
    """Build, export and configure the ResNet-18-style network (random weights)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut: nn.Module = nn.Identity()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))

    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    network = nn.Sequential(*layers)
    # batch-norm statistics from a few random batches, so eval-mode activations stay in range
    network.train()
    with torch.no_grad():
        for _ in range(3):
            network(torch.rand(8, 3, image_size, image_size))
    network.eval()
    return _export(network, repo, name, version, (1, 3, image_size, image_size))


def _export(
    network: torch.nn.Module, repo: Path, name: str, version: int, shape: tuple[int, ...]
) -> Path:
    import torch

    path = repo / name / str(version) / modelgen.MODEL_FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        torch.onnx.export(
            network,
            (torch.zeros(shape),),
            str(path),
            input_names=["image"],
            output_names=["logits"],
            dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
            opset_version=modelgen.OPSET,
            dynamo=False,
        )
    write_config(repo / name, modelgen.model_config(path, max_batch_size=32, dynamic_batching=True))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    path, _, accuracy = train_digits_cnn(args.out)
    print(f"exported {path}: test accuracy {accuracy:.2%}")
    print(f"exported {resnet18(args.out)}")


if __name__ == "__main__":
    main()
