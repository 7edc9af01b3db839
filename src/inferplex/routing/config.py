"""The routing file: ``<model repository>/routing.yaml``, read into frozen pydantic models.

One file at the top of the repository (not a folder, so the model scan never mistakes it for a
model) declares every route. A route is a name clients send requests to, like a model name,
that the server answers from other models::

    routes:
      digits:                        # A/B or canary: split by weight
        targets:
          - {model: digits, version: 1, weight: 90}
          - {model: digits, version: 2, weight: 10}
        sticky: {parameter: routing_key}   # same key -> same target (optional)
        shadow: {model: digits_next, fraction: 1.0}   # mirrored; answers discarded
      classifier:                    # graceful degradation to a faster variant
        variants:
          - {model: clf_fp32, label: fp32}
          - {model: clf_int8, label: int8}
        degrade: {max_queue: 8, p99_ms: 20}

Every error names the file and the field path and says what was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from inferplex.errors import ConfigError

ROUTING_FILE = "routing.yaml"

#: the request parameter whose value makes a pick sticky, unless the route names another
DEFAULT_STICKY_PARAMETER = "routing_key"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _version_text(value: Any) -> Any:
    # YAML reads `version: 2` as a number
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _version_number(value: str) -> str:
    if value and not value.isdigit():
        raise ValueError(f"version must be a version number such as 2, got '{value}'")
    return value


#: a model version as routes name it: digits, or empty for the model's default version
Version = Annotated[str, BeforeValidator(_version_text), AfterValidator(_version_number)]


class TargetConfig(_Frozen):
    """A model (and optionally a version) that answers a route's requests."""

    model: str = Field(min_length=1)
    version: Version = Field(default="", description="empty: the model's default version")
    weight: float = Field(default=1.0, ge=0, description="share of the traffic (split routes)")
    label: str = Field(default="", description="name in statistics and responses")

    @property
    def name(self) -> str:
        """The label, else ``model`` or ``model:version``."""
        if self.label:
            return self.label
        return f"{self.model}:{self.version}" if self.version else self.model


class StickyConfig(_Frozen):
    """Requests carrying the same value of ``parameter`` go to the same target."""

    parameter: str = Field(default=DEFAULT_STICKY_PARAMETER, min_length=1)


class ShadowConfig(_Frozen):
    """A model that gets a copy of the route's traffic; its answers are compared with the
    primary's and discarded."""

    model: str = Field(min_length=1)
    version: Version = ""
    fraction: float = Field(default=1.0, gt=0, le=1, description="share of requests mirrored")
    max_in_flight: int = Field(
        default=64, ge=1, description="shadow requests running at once; more are skipped"
    )


class DegradeConfig(_Frozen):
    """When a variant counts as overloaded, so that the next (faster) one answers."""

    max_queue: int = Field(
        default=0, ge=0, description="queued requests at which it is overloaded; 0 = ignore"
    )
    p99_ms: float = Field(
        default=0, ge=0, description="p99 latency above which it is overloaded; 0 = ignore"
    )
    window_s: float = Field(default=10.0, gt=0, description="the p99 covers this many seconds")
    min_samples: int = Field(default=20, ge=1, description="fewer samples: p99 not trusted")
    when_breaker_open: bool = Field(
        default=True, description="a variant whose circuit breaker is open is skipped"
    )


class RouteConfig(_Frozen):
    """One route: either weighted ``targets`` or ordered ``variants``."""

    targets: tuple[TargetConfig, ...] = ()
    variants: tuple[TargetConfig, ...] = ()
    sticky: StickyConfig | None = None
    seed: int | None = Field(default=None, description="seed of the weighted picks (tests)")
    shadow: ShadowConfig | None = None
    degrade: DegradeConfig | None = None

    @field_validator("sticky", mode="before")
    @classmethod
    def _sticky_shorthand(cls, value: Any) -> Any:
        # `sticky: user` names the parameter; `sticky: true` takes the default one
        if value is True:
            return {}
        if isinstance(value, str):
            return {"parameter": value}
        return value

    @model_validator(mode="after")
    def _check(self) -> RouteConfig:
        if bool(self.targets) == bool(self.variants):
            raise ValueError("give either 'targets' (weighted split) or 'variants', not both")
        if self.targets:
            if sum(t.weight for t in self.targets) <= 0:
                raise ValueError("the targets' weights add up to 0: no target gets traffic")
            if self.degrade is not None:
                raise ValueError("'degrade' applies to 'variants' only")
        else:
            if len(self.variants) < 2:
                raise ValueError("'variants' needs at least two models (primary first)")
            if self.sticky is not None:
                raise ValueError("'sticky' applies to weighted 'targets' only")
        names = [t.name for t in self.targets or self.variants]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(
                f"targets must differ (or have distinct labels): {', '.join(duplicates)} "
                "appears twice"
            )
        return self

    @property
    def kind(self) -> str:
        return "split" if self.targets else "variants"

    @property
    def members(self) -> tuple[TargetConfig, ...]:
        """The targets or the variants, whichever the route has."""
        return self.targets or self.variants


class RoutingFile(_Frozen):
    routes: dict[str, RouteConfig] = Field(default_factory=dict)

    @field_validator("routes")
    @classmethod
    def _check_names(cls, routes: dict[str, RouteConfig]) -> dict[str, RouteConfig]:
        for name in routes:
            if not name or "/" in name:
                raise ValueError(f"route name '{name}' must be non-empty and have no '/'")
        return routes


def read_routing(repository: Path) -> RoutingFile | None:
    """The repository's routing file, None when there is none. ConfigError names every
    problem. Blocking (reads a file): call it off the event loop."""
    path = repository / ROUTING_FILE
    if not path.is_file():
        return None
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from None
    return parse_routing(raw, str(path))


def parse_routing(raw: Any, source: str = ROUTING_FILE) -> RoutingFile:
    """Validate a parsed routing document; ConfigError with one line per problem."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping with a 'routes' key")
    try:
        return RoutingFile.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"]) or "(top level)"
            message = error["msg"].removeprefix("Value error, ")
            lines.append(f"{source}: {where}: {message}")
        raise ConfigError("\n".join(lines)) from None
