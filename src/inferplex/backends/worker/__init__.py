"""What every backend that runs its models in worker processes shares (Python handlers,
isolated ONNX Runtime and PyTorch models): the process pool and its pipe protocol
(``process_backend``, ``worker_process``), the shared-memory tensor arena (``arena``) and the
per-request cancellation slots (``cancel``)."""
