"""The model mesh: replicas sharing the models by a consistent-hash ring (docs/mesh.md)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from inferplex.config.settings.section import SettingsSection


class MeshSettings(SettingsSection):
    """Who the replicas are, which one this is, and how many own each model."""

    mesh_replicas: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="the names of every replica of a model mesh, this one included (e.g. the "
        "StatefulSet's pod names): a consistent-hash ring over them says which models each "
        "replica owns; at start a replica loads only the models it owns and loads others on "
        "demand (needs load_on_demand); empty = no mesh. Comma-separated (or a JSON list in "
        "the environment)",
    )
    mesh_members: str = Field(
        default="",
        description="where the mesh's replica names are read while it runs, in place of "
        "mesh_replicas: file:PATH (one name a line, read again when it changes; a mounted "
        "ConfigMap) or dns:TEMPLATE:max=N (a StatefulSet's pods, e.g. "
        "dns:inferplex-mesh-{i}.inferplex-mesh:max=16: indices 0 to the highest that "
        "resolves). On a change the replica loads the models it newly owns; empty = the "
        "fixed mesh_replicas",
    )
    mesh_refresh_secs: float = Field(
        default=5.0,
        gt=0,
        description="how often mesh_members is read again (a file: its mtime and size)",
    )
    mesh_self: str = Field(
        default="",
        description="this replica's name among mesh_replicas (on Kubernetes the pod's name)",
    )
    mesh_copies: int = Field(
        default=1,
        ge=1,
        description="how many replicas own each model (a model's config parameter mesh_copies "
        "overrides); nginx spreads a model's requests over its owners",
    )

    @field_validator("mesh_replicas", mode="before")
    @classmethod
    def _replica_names(cls, value: Any) -> Any:
        """``a,b`` (flag, repeated flags or environment; a JSON list too) -> ("a", "b")."""
        if isinstance(value, str):
            value = json.loads(value) if value.lstrip().startswith("[") else [value]
        if isinstance(value, (list, tuple)):
            return tuple(n.strip() for item in value for n in str(item).split(",") if n.strip())
        return value
