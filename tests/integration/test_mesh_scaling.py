"""A mesh that scales on loopback (docs/mesh.md, "Scaling"): replicas with --mesh-members
reading a members file, a real nginx whose configuration `inferplex mesh nginx-config --watch`
rewrites and reloads from the same file, HTTP and gRPC traffic over every model throughout.

2 -> 3 replicas, then 3 -> 2: nginx reloads onto the new ring, 0 failed requests over HTTP and
over gRPC, after each change every model answers over both, the models that move (loaded
somewhere new) are only those whose owner changed, and the replica that joined answers its
models.

Each replica listens on a loopback address of its own (127.0.0.11 to .13, at the same ports),
which is its ring name, so one members file serves the replicas and nginx, and nginx's gRPC
upstreams are the replicas' gRPC ports (bench/mesh_scaling.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.mesh_cluster import add_sub_workload
from bench.mesh_scaling import ScalingMesh
from inferplex.mesh.ring import Ring
from inferplex_tools.benchtool.cluster import nginx_binary
from tests.integration.test_mesh import _successes

MODELS = 24

pytestmark = pytest.mark.skipif(
    nginx_binary() is None, reason="nginx is not installed (scripts/system_packages.sh)"
)


@pytest.fixture
def scaling(tmp_path: Path) -> Iterator[ScalingMesh]:
    cluster = ScalingMesh(tmp_path, MODELS)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_scale_out_and_in_moves_only_models_whose_owner_changed(scaling: ScalingMesh) -> None:
    two, three = scaling.names[:2], scaling.names
    newcomer = three[2]
    assert scaling.loaded() == {**scaling.owned(two), newcomer: set()}
    changed = {m for m in scaling.models if Ring(two).owners(m, 1) != Ring(three).owners(m, 1)}
    with scaling.load(add_sub_workload(), http_clients=2, grpc_clients=2) as load:
        load.wait_for(2 * MODELS)
        # scale() returns once every model answered over HTTP and over gRPC since the owners
        # on the new ring loaded (a TimeoutError otherwise)
        moved_out = scaling.scale(three, load)
        assert moved_out[newcomer] == scaling.owned(three)[newcomer] == changed
        assert all(moved_out[n] <= changed for n in two), moved_out
        assert changed <= _successes(scaling.replicas[newcomer].metrics_url)
        moved_in = scaling.scale(two, load)
        assert all(moved_in[n] <= changed for n in two), moved_in
        # nothing needs loading: the models the newcomer took were left loaded on their old
        # owners (to --memory-limit's eviction), which now own them again
    assert not load.failures, load.failures[:5]
    assert set(load.ok) == {"http", "grpc"}, load.ok
