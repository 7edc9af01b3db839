"""The system shared-memory extension: regions clients register, each its registering
principal's, and tensors read from and written to them (see registry.py, region.py)."""

from inferplex.shm.registry import (
    CUDA_UNSUPPORTED,
    FLAG,
    REGION,
    ReadOffLoop,
    Region,
    Regions,
    SharedMemoryRegistry,
    cuda_status,
)

__all__ = [
    "CUDA_UNSUPPORTED",
    "FLAG",
    "REGION",
    "ReadOffLoop",
    "Region",
    "Regions",
    "SharedMemoryRegistry",
    "cuda_status",
]
