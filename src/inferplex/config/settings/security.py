"""Who may call what (tokens, restricted APIs, TLS, a management listener), what clients may
make the server hold (headers, shared memory), and what model code may see (docs/security.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, FilePath, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import NoDecode

from inferplex.config.restricted_apis import parse_groups
from inferplex.config.settings.section import SettingsSection
from inferplex.config.token_files import read_token_files


class SecuritySettings(SettingsSection):
    """Tokens, TLS, restricted APIs, shared memory and the workers' environment."""

    inference_token: SecretStr | None = Field(
        default=None,
        description="API token for inference endpoints (none = open); prefer the environment "
        "variable to the flag, which other users of the machine see in ps",
    )
    management_token: SecretStr | None = Field(
        default=None,
        description="API token for the management API (load/unload, shared memory); once any "
        "token is set, management needs this one; prefer the environment variable to the flag",
    )
    inference_token_file: Path | None = Field(
        default=None,
        description="file holding the inference token, read at start (one trailing newline "
        "dropped; mode 600): unlike the environment and flags, out of reach of model code "
        "once the file is gone or was a pipe (docs/security.md)",
    )
    management_token_file: Path | None = Field(
        default=None,
        description="file holding the management token, as --inference-token-file",
    )
    management_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="serve the HTTP management API on this port only (0 = any free port); "
        "unset = on the HTTP port",
    )
    management_host: str | None = Field(
        default=None, description="address of the management listener (default: --host)"
    )
    http_restricted_api: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="tritonserver's restricted APIs on HTTP: <apis>:<key>=<value> (apis "
        "comma-separated: health, metadata, inference, shared-memory, model-config, "
        "model-repository, statistics, trace, logging) answer only calls with the header "
        "<key>: <value>, besides the tokens; in the environment a JSON list",
    )
    grpc_restricted_protocol: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="as --http-restricted-api, on gRPC: the metadata key is "
        "triton-grpc-protocol-<key>, as tritonserver's",
    )
    tls_cert_file: FilePath | None = Field(
        default=None, description="PEM certificate: HTTPS + gRPC TLS"
    )
    tls_key_file: FilePath | None = Field(
        default=None, description="PEM private key of the certificate"
    )
    tls_client_ca: FilePath | None = Field(
        default=None,
        description="PEM CA bundle: clients must present a certificate it signed (mTLS)",
    )
    model_key_file: FilePath | None = Field(
        default=None,
        description="file with the AES-256 key of encrypted models (or INFERPLEX_MODEL_KEY)",
    )
    max_header_bytes: int = Field(
        default=64 * 1024,
        ge=0,
        description="largest total size of request headers / gRPC metadata; 0 = no limit",
    )
    allow_shared_memory: bool = Field(
        default=False,
        description="let clients register system shared-memory regions and pass tensors "
        "through them (docs/shared_memory.md); off by default: a region lets a client make the "
        "server read and write that memory",
    )
    max_shared_memory_regions: int = Field(
        default=128,
        ge=1,
        description="most system shared-memory regions one principal (token, or anonymous) may "
        "have registered at once; each holds a file descriptor. One more gets 429 / "
        "RESOURCE_EXHAUSTED",
    )
    worker_env: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="environment variables passed on to the worker processes of Python models "
        "and isolated models, beside the documented list (PATH, HOME, LANG, LC_*, TMPDIR, "
        "PYTHONPATH, CUDA_*, ...; docs/security.md); every other variable, the server's own "
        "INFERPLEX_* settings first, stays out of reach of a model's code. In the environment "
        "comma-separated (or a JSON list)",
    )

    @field_validator("http_restricted_api", "grpc_restricted_protocol", mode="before")
    @classmethod
    def _restricted_groups(cls, value: Any, info: ValidationInfo) -> Any:
        """One string (environment: a JSON list) or several; each a well-formed group."""
        if isinstance(value, str):
            value = json.loads(value) if value.lstrip().startswith("[") else [value]
        parse_groups("--" + (info.field_name or "").replace("_", "-"), value)
        return tuple(value)

    @field_validator("worker_env", mode="before")
    @classmethod
    def _variable_names(cls, value: Any) -> Any:
        """``A,B`` (environment; a JSON list too) -> ("A", "B"); each a variable's name, and
        none of the server's own (INFERPLEX_*: tokens, the model key)."""
        if isinstance(value, str):
            value = (
                json.loads(value)
                if value.lstrip().startswith("[")
                else tuple(filter(None, (name.strip() for name in value.split(","))))
            )
        for name in value if isinstance(value, (list, tuple)) else ():
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{name!r} is not an environment variable name such as HF_HOME")
            if name.upper().startswith("INFERPLEX_"):
                raise ValueError(
                    f"{name}: the server's own settings (INFERPLEX_*) are never passed to workers"
                )
        return value

    @model_validator(mode="before")
    @classmethod
    def _token_files(cls, data: Any) -> Any:
        """Tokens given as files are read now (config/token_files.py)."""
        return read_token_files(data) if isinstance(data, dict) else data
