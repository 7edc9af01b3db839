"""ServerConfig: the server-wide settings, from flags or INFERPLEX_* environment variables.

Each field is one setting, in one place: its type, default and description are also its
``inferplex serve`` flag (``--field-name``; cli/options.py builds the flags from the fields),
its environment variable (``INFERPLEX_FIELD_NAME``) and its documentation. The fields live
in sections (config/settings/: the listeners, request limits, security, HTTP/1.1 and HTTP/2
bounds, lifecycle, mesh, ...), each beside the validators that check them; ServerConfig
inherits them all. Markers say what the type alone does not: :class:`NoFlag` (set through
the environment only), :class:`FlagChoices` (the values a ``str`` flag offers) and
:class:`OneValue` (a flag that must not be repeated).
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

from inferplex.config.settings.connections import ConnectionSettings, StreamSettings
from inferplex.config.settings.execution import ExecutionSettings
from inferplex.config.settings.generative import GenerativeSettings
from inferplex.config.settings.http1 import Http1Settings
from inferplex.config.settings.http2 import Http2Settings
from inferplex.config.settings.lifecycle import ModelLifecycleSettings, StartStopSettings
from inferplex.config.settings.listeners import ListenerSettings
from inferplex.config.settings.mesh import MeshSettings
from inferplex.config.settings.observability import ObservabilitySettings
from inferplex.config.settings.repository import RepositorySettings
from inferplex.config.settings.request_limits import (
    DEFAULT_MAX_MODEL_INSTANCES,
    RequestLimitSettings,
)
from inferplex.config.settings.routing import RoutingSettings
from inferplex.config.settings.section import FlagChoices, NoFlag, OneValue
from inferplex.config.settings.security import SecuritySettings

__all__ = ["DEFAULT_MAX_MODEL_INSTANCES", "FlagChoices", "NoFlag", "OneValue", "ServerConfig"]


class ServerConfig(
    # pydantic puts a later base's fields before an earlier one's, so the sections are listed
    # from the last to the first: `inferplex serve --help` shows them from the bottom up
    ObservabilitySettings,
    RoutingSettings,
    MeshSettings,
    ModelLifecycleSettings,
    Http2Settings,
    GenerativeSettings,
    StreamSettings,
    ConnectionSettings,
    Http1Settings,
    SecuritySettings,
    StartStopSettings,
    ExecutionSettings,
    RequestLimitSettings,
    ListenerSettings,
    RepositorySettings,
    BaseSettings,
):
    """Validated once at start-up, then frozen. Every field can be set as INFERPLEX_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="INFERPLEX_", extra="forbid", frozen=True)
