"""The system shared-memory extension: regions clients register, tensors read from and
written to them (see registry.py)."""

from inferplex.shm.registry import (
    CUDA_UNSUPPORTED,
    FLAG,
    REGION,
    Region,
    SharedMemoryRegistry,
    cuda_status,
)

__all__ = ["CUDA_UNSUPPORTED", "FLAG", "REGION", "Region", "SharedMemoryRegistry", "cuda_status"]
