"""Message classes of the V2 gRPC protocol (package ``inference``), built from inference.desc.

``inference.desc`` is the FileDescriptorSet that scripts/gen_proto.sh compiles from proto/.
It is loaded into a *private* descriptor pool: tritonclient registers its own generated
``inference.*`` messages in protobuf's default pool, and a second registration of the same
names there fails, so generated ``*_pb2`` modules could not live in one process with it.
Messages are wire-compatible with tritonclient's either way; only the Python classes differ.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import ServiceDescriptor

PACKAGE = "inference"
SERVICE_NAME = "inference.GRPCInferenceService"


def _load_pool() -> descriptor_pool.DescriptorPool:
    data = resources.files(__name__).joinpath("inference.desc").read_bytes()
    pool = descriptor_pool.DescriptorPool()
    for file_proto in descriptor_pb2.FileDescriptorSet.FromString(data).file:
        pool.Add(file_proto)
    return pool


POOL = _load_pool()
SERVICE: ServiceDescriptor = POOL.FindServiceByName(SERVICE_NAME)


def message_class(name: str) -> Any:
    """The message class of ``inference.<name>`` (nested types are its attributes)."""
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


# Annotated Any: the classes are made at run time, so type checkers cannot see their fields.

# grpc_service.proto
ServerLiveRequest: Any = message_class("ServerLiveRequest")
ServerLiveResponse: Any = message_class("ServerLiveResponse")
ServerReadyRequest: Any = message_class("ServerReadyRequest")
ServerReadyResponse: Any = message_class("ServerReadyResponse")
ModelReadyRequest: Any = message_class("ModelReadyRequest")
ModelReadyResponse: Any = message_class("ModelReadyResponse")
ServerMetadataRequest: Any = message_class("ServerMetadataRequest")
ServerMetadataResponse: Any = message_class("ServerMetadataResponse")
ModelMetadataRequest: Any = message_class("ModelMetadataRequest")
ModelMetadataResponse: Any = message_class("ModelMetadataResponse")
InferParameter: Any = message_class("InferParameter")
InferTensorContents: Any = message_class("InferTensorContents")
ModelInferRequest: Any = message_class("ModelInferRequest")
ModelInferResponse: Any = message_class("ModelInferResponse")
ModelStreamInferResponse: Any = message_class("ModelStreamInferResponse")
ModelConfigRequest: Any = message_class("ModelConfigRequest")
ModelConfigResponse: Any = message_class("ModelConfigResponse")
ModelStatisticsRequest: Any = message_class("ModelStatisticsRequest")
StatisticDuration: Any = message_class("StatisticDuration")
InferStatistics: Any = message_class("InferStatistics")
InferResponseStatistics: Any = message_class("InferResponseStatistics")
InferBatchStatistics: Any = message_class("InferBatchStatistics")
MemoryUsage: Any = message_class("MemoryUsage")
ModelStatistics: Any = message_class("ModelStatistics")
ModelStatisticsResponse: Any = message_class("ModelStatisticsResponse")
ModelRepositoryParameter: Any = message_class("ModelRepositoryParameter")
RepositoryIndexRequest: Any = message_class("RepositoryIndexRequest")
RepositoryIndexResponse: Any = message_class("RepositoryIndexResponse")
RepositoryModelLoadRequest: Any = message_class("RepositoryModelLoadRequest")
RepositoryModelLoadResponse: Any = message_class("RepositoryModelLoadResponse")
RepositoryModelUnloadRequest: Any = message_class("RepositoryModelUnloadRequest")
RepositoryModelUnloadResponse: Any = message_class("RepositoryModelUnloadResponse")
SystemSharedMemoryStatusRequest: Any = message_class("SystemSharedMemoryStatusRequest")
SystemSharedMemoryStatusResponse: Any = message_class("SystemSharedMemoryStatusResponse")
SystemSharedMemoryRegisterRequest: Any = message_class("SystemSharedMemoryRegisterRequest")
SystemSharedMemoryRegisterResponse: Any = message_class("SystemSharedMemoryRegisterResponse")
SystemSharedMemoryUnregisterRequest: Any = message_class("SystemSharedMemoryUnregisterRequest")
SystemSharedMemoryUnregisterResponse: Any = message_class("SystemSharedMemoryUnregisterResponse")
CudaSharedMemoryStatusRequest: Any = message_class("CudaSharedMemoryStatusRequest")
CudaSharedMemoryStatusResponse: Any = message_class("CudaSharedMemoryStatusResponse")
CudaSharedMemoryRegisterRequest: Any = message_class("CudaSharedMemoryRegisterRequest")
CudaSharedMemoryRegisterResponse: Any = message_class("CudaSharedMemoryRegisterResponse")
CudaSharedMemoryUnregisterRequest: Any = message_class("CudaSharedMemoryUnregisterRequest")
CudaSharedMemoryUnregisterResponse: Any = message_class("CudaSharedMemoryUnregisterResponse")
# model_config.proto
ModelRateLimiter: Any = message_class("ModelRateLimiter")
ModelInstanceGroup: Any = message_class("ModelInstanceGroup")
ModelTensorReshape: Any = message_class("ModelTensorReshape")
ModelInput: Any = message_class("ModelInput")
ModelOutput: Any = message_class("ModelOutput")
BatchInput: Any = message_class("BatchInput")
BatchOutput: Any = message_class("BatchOutput")
ModelVersionPolicy: Any = message_class("ModelVersionPolicy")
ModelQueuePolicy: Any = message_class("ModelQueuePolicy")
ModelDynamicBatching: Any = message_class("ModelDynamicBatching")
ModelSequenceBatching: Any = message_class("ModelSequenceBatching")
ModelEnsembling: Any = message_class("ModelEnsembling")
ModelParameter: Any = message_class("ModelParameter")
ModelWarmup: Any = message_class("ModelWarmup")
ModelOperations: Any = message_class("ModelOperations")
ModelTransactionPolicy: Any = message_class("ModelTransactionPolicy")
ModelRepositoryAgents: Any = message_class("ModelRepositoryAgents")
ModelResponseCache: Any = message_class("ModelResponseCache")
ModelMetrics: Any = message_class("ModelMetrics")
ModelOptimizationPolicy: Any = message_class("ModelOptimizationPolicy")
ModelConfig: Any = message_class("ModelConfig")
