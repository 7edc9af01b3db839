"""Schema validation of every object in deploy/, built-in kinds and custom resources alike.

Built-in kinds are validated by kubernetes-validate in strict mode (unknown fields fail)
against the Kubernetes versions in ``KUBERNETES_VERSIONS``. kubernetes-validate has no
schemas for custom resources, so the three that deploy/ uses (Prometheus Operator's
ServiceMonitor, KServe's ServingRuntime and InferenceService) get the JSON Schemas below:
hand-written subsets of their CRDs' OpenAPI schemas that hold every field deploy/ uses, with
its type and the CRD's required fields, and reject any other field, so a typo fails as it
does for a built-in kind. Their containers are validated as Kubernetes containers. A kind
with neither kind of schema fails the test: nothing is skipped silently.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import kubernetes_validate

#: Oldest Kubernetes release still commonly run, and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.29", kubernetes_validate.latest_version())

Schema = dict[str, Any]
STRING: Schema = {"type": "string"}
BOOLEAN: Schema = {"type": "boolean"}
STRING_MAP: Schema = {"type": "object", "additionalProperties": STRING}
#: Prometheus Operator's duration format (e.g. 15s, 1m30s).
DURATION: Schema = {"type": "string", "pattern": r"^(0|([0-9]+(ms|s|m|h|d|w|y))+)$"}


def strict(required: tuple[str, ...] = (), **properties: Schema) -> Schema:
    """An object with exactly these properties, the ``required`` ones mandatory."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def array(items: Schema, min_items: int = 0) -> Schema:
    return {"type": "array", "items": items, "minItems": min_items}


def resource(api_version: str, kind: str, spec: Schema) -> Schema:
    metadata = {
        "type": "object",
        "properties": {"name": STRING, "namespace": STRING, "labels": STRING_MAP,
                       "annotations": STRING_MAP},
        "required": ["name"],
    }  # fmt: skip
    return strict(
        ("apiVersion", "kind", "metadata", "spec"),
        apiVersion={"const": api_version},
        kind={"const": kind},
        metadata=metadata,
        spec=spec,
    )


LABEL_SELECTOR = strict(
    matchLabels=STRING_MAP, matchExpressions=array({"type": "object"})
)  # fmt: skip

SERVICE_MONITOR = resource(
    "monitoring.coreos.com/v1",
    "ServiceMonitor",
    strict(
        ("selector",),
        selector=LABEL_SELECTOR,
        namespaceSelector=strict(any=BOOLEAN, matchNames=array(STRING)),
        jobLabel=STRING,
        endpoints=array(
            strict(
                port=STRING,
                path=STRING,
                scheme={"enum": ["http", "https"]},
                interval=DURATION,
                scrapeTimeout=DURATION,
                honorLabels=BOOLEAN,
            ),
            min_items=1,
        ),
    ),
)

_PROTOCOLS = {"enum": ["v1", "v2", "grpc-v1", "grpc-v2"]}

SERVING_RUNTIME = resource(
    "serving.kserve.io/v1alpha1",
    "ServingRuntime",
    strict(
        ("containers",),
        supportedModelFormats=array(
            strict(
                ("name",),
                name=STRING,
                version=STRING,
                autoSelect=BOOLEAN,
                priority={"type": "integer", "minimum": 1},
            ),
            min_items=1,
        ),
        protocolVersions=array(_PROTOCOLS, min_items=1),
        multiModel=BOOLEAN,
        disabled=BOOLEAN,
        containers=array({"type": "object"}, min_items=1),  # validated as Kubernetes containers
    ),
)

#: KServe's ModelSpec: a Kubernetes container (validated as one) plus these fields.
_MODEL_FIELDS = ("modelFormat", "runtime", "runtimeVersion", "protocolVersion", "storageUri")

INFERENCE_SERVICE = resource(
    "serving.kserve.io/v1beta1",
    "InferenceService",
    strict(
        ("predictor",),
        predictor=strict(
            ("model",),
            minReplicas={"type": "integer", "minimum": 0},
            maxReplicas={"type": "integer", "minimum": 1},
            model={
                "type": "object",
                "properties": {
                    "modelFormat": strict(("name",), name=STRING, version=STRING),
                    "runtime": STRING,
                    "runtimeVersion": STRING,
                    "protocolVersion": _PROTOCOLS,
                    "storageUri": {"type": "string", "pattern": r"^[a-z0-9]+://"},
                },
                "required": ["modelFormat", "storageUri"],
            },
        ),
    ),
)

CUSTOM_RESOURCES: dict[str, Schema] = {
    "ServiceMonitor": SERVICE_MONITOR,
    "ServingRuntime": SERVING_RUNTIME,
    "InferenceService": INFERENCE_SERVICE,
}


def validate(obj: dict[str, Any], version: str) -> None:
    """Raise if ``obj`` is not valid for Kubernetes ``version`` (see the module's docstring)."""
    schema = CUSTOM_RESOURCES.get(obj.get("kind", ""))
    if schema is None:
        kubernetes_validate.validate(obj, version, strict=True)
        return
    jsonschema.validate(obj, schema)
    for container in _containers(obj):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "container-check"},
            "spec": {"containers": [container]},
        }
        kubernetes_validate.validate(pod, version, strict=True)


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The Kubernetes containers inside a KServe resource."""
    if obj["kind"] == "ServingRuntime":
        return list(obj["spec"]["containers"])
    if obj["kind"] == "InferenceService":
        model = copy.deepcopy(obj["spec"]["predictor"]["model"])
        for field in _MODEL_FIELDS:
            model.pop(field, None)
        return [{"name": "kserve-container", **model}]
    return []
