"""The REST route table: every route's scope, and paths only in their canonical form."""

import pytest

from inferplex.frontends.http_routes import RouteError, resolve
from inferplex.security.scopes import Scope


@pytest.mark.parametrize(
    ("path", "handler", "scope"),
    [
        ("/v2/health/live", "_live", Scope.HEALTH),
        ("/v2/health/ready", "_ready", Scope.HEALTH),
        ("/v2", "_server_metadata", Scope.INFERENCE),
        ("/v2/models/m", "_model_metadata", Scope.INFERENCE),
        ("/v2/models/m/versions/2", "_model_metadata", Scope.INFERENCE),
        ("/v2/models/m/infer", "_infer", Scope.INFERENCE),
        ("/v2/models/m/versions/2/infer", "_infer", Scope.INFERENCE),
        ("/v2/models/m/generate", "_generate", Scope.INFERENCE),
        ("/v2/models/m/versions/2/generate_stream", "_generate_stream", Scope.INFERENCE),
        ("/v2/models/stats", "_model_stats", Scope.INFERENCE),
        ("/v2/repository/index", "_repository_index", Scope.INFERENCE),
        ("/v2/repository/memory", "_repository_memory", Scope.INFERENCE),
        ("/v2/routes/r/stats", "_route_stats", Scope.INFERENCE),
        ("/v2/repository/models/m/load", "_model_load", Scope.MANAGEMENT),
        ("/v2/repository/models/m/unload", "_model_unload", Scope.MANAGEMENT),
        ("/v2/repository/models/m/instances", "_model_instances", Scope.MANAGEMENT),
        ("/v2/systemsharedmemory/region/r/register", "_shm_register", Scope.MANAGEMENT),
        ("/v2/systemsharedmemory/status", "_shm_status", Scope.MANAGEMENT),
        ("/v2/cudasharedmemory/status", "_cuda_shm_status", Scope.MANAGEMENT),
    ],
)
def test_routes_and_their_scopes(path: str, handler: str, scope: Scope) -> None:
    endpoint, _, _ = resolve(path, path.encode())
    assert (endpoint.handler, endpoint.scope) == (handler, scope)


def test_model_and_version_come_from_the_path() -> None:
    _, model, version = resolve("/v2/models/a.b-c/versions/3/infer")
    assert (model, version) == ("a.b-c", "3")
    _, model, _ = resolve("/v2/repository/models/x/load")
    assert model == "x"


@pytest.mark.parametrize(
    ("path", "raw_path"),
    [
        ("//v2/repository/models/x/load", None),
        ("/v2//repository/models/x/load", None),
        ("/v2/repository//models/x/load", None),
        ("/v2/repository/models/x/load/", None),
        ("/v2/health/live/", None),
        ("/v2/./repository/models/x/load", None),
        ("/v2/models/../repository/models/x/load", None),
        ("/v2/models/x/..", None),
        ("/v2/repository/models/x/load", b"/v2/repository%2Fmodels/x/load"),
        ("/v2/repository/models/x/load", b"/v2/repository%2fmodels/x/load"),
        ("/v2/models/a\\b/infer", b"/v2/models/a%5Cb/infer"),
        ("/v2/models/x\x00/infer", b"/v2/models/x%00/infer"),
        ("v2/repository/models/x/load", None),
        ("*", None),
    ],
)
def test_paths_that_are_not_canonical_are_refused(path: str, raw_path: bytes | None) -> None:
    with pytest.raises(RouteError) as refused:
        resolve(path, raw_path)
    assert refused.value.status == 400


@pytest.mark.parametrize(
    "path", ["/", "/v1/models/m/infer", "/v2/models/m/predict", "/v2/repository/models/m/drop"]
)
def test_unknown_paths_are_404(path: str) -> None:
    with pytest.raises(RouteError) as refused:
        resolve(path, path.encode())
    assert refused.value.status == 404
