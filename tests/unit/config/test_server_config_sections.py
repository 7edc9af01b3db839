"""ServerConfig is made of sections (config/settings/): each group of fields in its own
module beside its validators. Every section must be one of ServerConfig's bases, or its
flags and variables silently vanish; and ServerConfig's settings (INFERPLEX_* variables,
frozen, unknown names refused) must reach the fields of every section."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pydantic
import pytest

import inferplex.config.settings
from inferplex.config.server_config import ServerConfig
from inferplex.config.settings.section import SettingsSection


def _sections() -> list[type[SettingsSection]]:
    """Every section class defined in config/settings/."""
    found = []
    for info in pkgutil.iter_modules(inferplex.config.settings.__path__):
        module = importlib.import_module(f"inferplex.config.settings.{info.name}")
        found += [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, SettingsSection)
            and value is not SettingsSection
            and value.__module__ == module.__name__
        ]
    return found


SECTIONS = _sections()


def test_every_section_is_part_of_server_config() -> None:
    assert len(SECTIONS) >= 10
    missing = [s.__name__ for s in SECTIONS if not issubclass(ServerConfig, s)]
    assert missing == []


def test_each_field_belongs_to_one_section_and_server_config_adds_none() -> None:
    owners: dict[str, list[str]] = {}
    for section in SECTIONS:
        for name in section.model_fields:
            owners.setdefault(name, []).append(section.__name__)
    assert {name: who for name, who in owners.items() if len(who) > 1} == {}
    # ServerConfig only assembles: every field it has comes from a section
    assert set(owners) == set(ServerConfig.model_fields)


def test_the_required_repository_flag_comes_first() -> None:
    assert next(iter(ServerConfig.model_fields)) == "model_repository"


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("http_port", "9000", 9000),  # listeners
        ("max_string_bytes", "10", 10),  # request limits
        ("worker_env", "HF_HOME,TORCH_HOME", ("HF_HOME", "TORCH_HOME")),  # security, NoDecode
        ("http2_max_resets", "5", 5),  # HTTP/2 bounds
        ("load_model", '["a", "b"]', ("a", "b")),  # lifecycle, NoDecode
        ("mesh_replicas", "r0,r1", ("r0", "r1")),  # mesh
        ("log_format", "ISO8601", "iso8601"),  # observability, tritonserver's spelling
        ("openai_max_choices", "3", 3),  # generative APIs
    ],
)
def test_every_section_reads_its_environment_variable_and_is_frozen(
    name: str, text: str, expected: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"INFERPLEX_{name.upper()}", text)
    config = ServerConfig(model_repository=tmp_path)
    assert getattr(config, name) == expected
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        setattr(config, name, expected)


def test_an_unknown_setting_is_refused(tmp_path: Path) -> None:
    with pytest.raises(pydantic.ValidationError, match=r"http2_max_reset\n.*Extra inputs"):
        ServerConfig(model_repository=tmp_path, http2_max_reset=5)  # type: ignore[call-arg]
