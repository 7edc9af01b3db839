"""Small ONNX models built with ``onnx.helper``, for the examples, the benchmarks and the tests
(not part of the server: run from the repository root, ``from examples import modelgen``).

Every builder writes ``<repo>/<name>/<version>/model.onnx`` (overwriting an older file, so
building twice is harmless) and returns that path. The configuration is written separately by
the caller: :func:`model_config` reads the model file's own signature and renders a
Triton-style config dict that always matches it, which the server's own writer
(``inferplex.config.writers.write_config``) saves as ``config.pbtxt`` or ``config.yaml``::

    path = modelgen.add_sub(repo)
    config = modelgen.model_config(path, max_batch_size=8, dynamic_batching=True)
    write_config(repo / "add_sub", config)

No torch, no network: the only trained model (:func:`digits_mlp`) is fitted with scikit-learn
on the digits data set bundled with it, and its weights are written out by hand.
"""

from examples.modelgen.basic import add_sub, identity, reshape, scale, slow
from examples.modelgen.configs import PLATFORM, TensorSpec, model_config, signature
from examples.modelgen.networks import crop_net, mlp, small_cnn
from examples.modelgen.onnxfile import IR_VERSION, MODEL_FILENAME, ONNX_TO_V2, OPSET, V2_TO_ONNX
from examples.modelgen.trained import TrainedModel, digits_mlp

__all__ = [
    "IR_VERSION",
    "MODEL_FILENAME",
    "ONNX_TO_V2",
    "OPSET",
    "PLATFORM",
    "V2_TO_ONNX",
    "TensorSpec",
    "TrainedModel",
    "add_sub",
    "crop_net",
    "digits_mlp",
    "identity",
    "mlp",
    "model_config",
    "reshape",
    "scale",
    "signature",
    "slow",
    "small_cnn",
]
