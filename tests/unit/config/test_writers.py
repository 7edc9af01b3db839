"""The config writer: config dicts rendered as config.pbtxt (against the compiled schema) and
config.yaml, and read back by the readers as the same model configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from examples import modelgen
from inferplex.config import readers
from inferplex.config.pbtxt import parse_pbtxt
from inferplex.config.writers import render, to_pbtxt, to_yaml, write_config


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return tmp_path


def test_to_pbtxt_renders_triton_text_format() -> None:
    config = {
        "name": 'a "quoted"\\name',
        "max_batch_size": 8,
        "input": [
            {"name": "A", "data_type": "TYPE_FP32", "dims": [-1, 3]},
            {"name": "B", "data_type": "TYPE_STRING", "dims": []},
        ],
        "instance_group": [{"kind": "KIND_CPU", "count": 2}],
        "dynamic_batching": {},
        "version_policy": {"latest": {"num_versions": 1}},
        "parameters": {"key": "k", "value": {"string_value": "v"}},
        "flag": True,
    }
    assert to_pbtxt(config) == (
        'name: "a \\"quoted\\"\\\\name"\n'
        "max_batch_size: 8\n"
        "input [\n"
        "  {\n"
        '    name: "A"\n'
        "    data_type: TYPE_FP32\n"
        "    dims: [ -1, 3 ]\n"
        "  },\n"
        "  {\n"
        '    name: "B"\n'
        "    data_type: TYPE_STRING\n"
        "    dims: [ ]\n"
        "  }\n"
        "]\n"
        "instance_group [\n"
        "  {\n"
        "    kind: KIND_CPU\n"
        "    count: 2\n"
        "  }\n"
        "]\n"
        "dynamic_batching { }\n"
        "version_policy {\n"
        "  latest {\n"
        "    num_versions: 1\n"
        "  }\n"
        "}\n"
        "parameters {\n"
        '  key: "k"\n'
        "  value {\n"
        '    string_value: "v"\n'
        "  }\n"
        "}\n"
        "flag: true\n"
    )


def test_to_pbtxt_writes_map_fields_as_key_value_entries(tmp_path: Path) -> None:
    """A mapping for one of Triton's map fields (the YAML form) becomes the text format's
    repeated entries, which Triton's parser and ours read back into the same map."""
    path = modelgen.add_sub(tmp_path)
    config = modelgen.model_config(path, max_batch_size=8)
    config["parameters"] = {"session.intra_op.allow_spinning": {"string_value": "1"}}
    config["dynamic_batching"] = {
        "priority_levels": 2,
        "priority_queue_policy": {1: {"max_queue_size": 4}},
    }
    config["model_warmup"] = [
        {
            "name": "zeros",
            "batch_size": 1,
            "inputs": {
                name: {"data_type": "TYPE_FP32", "dims": [16], "zero_data": True}
                for name in ("INPUT0", "INPUT1")
            },
        }
    ]
    text = to_pbtxt(config)
    assert 'key: "session.intra_op.allow_spinning"\n    value {' in text
    assert "key: 1\n      value {" in text
    write_config(tmp_path / "add_sub", config)
    model = readers.read_model_config(tmp_path / "add_sub")
    assert model.parameters == {"session.intra_op.allow_spinning": "1"}
    assert model.dynamic_batching.priority_queue_policy[1].max_queue_size == 4
    assert set(model.model_warmup[0].inputs) == {"INPUT0", "INPUT1"}


def test_to_yaml_round_trips(repo: Path) -> None:
    config = modelgen.model_config(modelgen.add_sub(repo), max_batch_size=8, dynamic_batching=True)
    assert yaml.safe_load(to_yaml(config)) == config


@pytest.mark.parametrize("fmt", ["pbtxt", "yaml"])
def test_written_configs_read_back_as_model_config(tmp_path: Path, fmt: str) -> None:
    path = modelgen.add_sub(tmp_path)
    config = modelgen.model_config(
        path, max_batch_size=8, instance_kind="KIND_CPU", dynamic_batching=True
    )
    written = write_config(tmp_path / "add_sub", config, fmt)  # type: ignore[arg-type]
    assert written == tmp_path / "add_sub" / f"config.{fmt}"
    model = readers.read_model_config(tmp_path / "add_sub")
    assert model.name == "add_sub"
    assert model.max_batch_size == 8
    assert [(t.name, t.data_type, t.dims) for t in model.input] == [
        ("INPUT0", "FP32", (16,)),
        ("INPUT1", "FP32", (16,)),
    ]
    assert model.instance_group[0].kind == "KIND_CPU"
    assert model.dynamic_batching is not None
    assert model.unsupported_fields == ()


def test_enums_are_bare_wherever_the_schema_has_them_and_unknown_names_by_value() -> None:
    """The schema, not a list of names, says what is an enum: ``optimization.priority`` too;
    a name it does not know (a typo, kept for the reader to report) is written by its type."""
    config = {
        "name": "m",
        "optimization": {"priority": "PRIORITY_MAX"},
        "sequence_batching": {"state": [{"input_name": "s", "data_type": "TYPE_INT32"}]},
        "misspelt": {"kind": "KIND_CPU", "count": 2},
    }
    text = to_pbtxt(config)
    assert "priority: PRIORITY_MAX\n" in text
    assert "data_type: TYPE_INT32\n" in text
    assert 'kind: "KIND_CPU"\n' in text  # under an unknown name: not known to be an enum
    parsed = parse_pbtxt(text)
    assert parsed["optimization"] == {"priority": "PRIORITY_MAX"}
    assert render(config, "yaml") == to_yaml(config)
