"""Names that reach the file system: model names and the files a config names stay inside the
model's folder, with one message whether or not the outside file exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.modelgen import add_sub
from inferplex.config.paths import MAX_NAME_BYTES, check_model_name, inside, relative_problem
from inferplex.config.readers import config_from_dict, read_model_config
from inferplex.errors import ConfigError, InvalidInputError
from inferplex.lifecycle.planning import plan_model
from inferplex.repository.local import list_models


@pytest.mark.parametrize(
    "name", ["m", "resnet-50_v2.1", "ü" * (MAX_NAME_BYTES // 2), "x" * MAX_NAME_BYTES, "a b"]
)
def test_names_a_folder_can_have_pass(name: str) -> None:
    assert check_model_name(name) == name


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("x" * 300, f"at most {MAX_NAME_BYTES} bytes in UTF-8 (the file system's limit"),
        ("ü" * 128, "got 256"),  # 128 characters, 256 bytes
        ("", "non-empty string"),
        (".", "may not be '.' or '..'"),
        ("..", "may not be '.' or '..'"),
        ("a/b", "may not hold '/' or '\\'"),
        ("a\\b", "may not hold '/' or '\\'"),
        ("a\0b", "control characters"),
        ("a\nb", "control characters"),
        ("a\x7fb", "control characters"),
        ("a\udc80", "valid Unicode"),
        (7, "non-empty string"),
    ],
)
def test_names_no_folder_can_have_are_invalid_input(name: object, fragment: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        check_model_name(name)
    assert fragment in caught.value.message
    assert "\n" not in caught.value.message  # a control character is shown escaped


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/etc/shadow", "must be relative to F, not absolute"),
        ("../x.onnx", "must stay inside F"),
        ("a/../../x", "must stay inside F"),
        ("./model.onnx", "must stay inside F"),
        ("a//b", "must stay inside F"),
        ("a\\..\\b", "backslashes"),
        ("a\0b", "NUL"),
        ("", "is empty"),
        ("x" * 256, "at most 255 bytes in UTF-8 per file or folder name"),
        ("a/" * 2100 + "b", "at most 4096 bytes"),
    ],
)
def test_relative_paths_only(path: str, fragment: str) -> None:
    assert fragment in (relative_problem(path, "F") or "")


@pytest.mark.parametrize("path", ["model.onnx", "sub/model.onnx", "model.savedmodel/x", "a..b"])
def test_plain_relative_paths_pass(path: str) -> None:
    assert relative_problem(path, "F") is None


def test_a_link_out_of_the_model_folder_is_refused_alike_whether_its_target_exists(
    tmp_path: Path,
) -> None:
    model_dir = tmp_path / "repo" / "m"
    version = model_dir / "1"
    version.mkdir(parents=True)
    (tmp_path / "outside.onnx").write_bytes(b"secret")
    (version / "exists.onnx").symlink_to(tmp_path / "outside.onnx")
    (version / "missing.onnx").symlink_to(tmp_path / "nothing-here.onnx")
    messages = []
    for name in ("exists.onnx", "missing.onnx"):
        with pytest.raises(ConfigError) as caught:
            inside(version, name, "default_model_filename", model_dir)
        messages.append(caught.value.message.replace(name, "NAME"))
    assert messages[0] == messages[1]
    assert "default_model_filename 'NAME' must stay inside m/1/" in messages[0]
    assert "symbolic link" in messages[0]


def test_links_inside_the_model_folder_are_followed(tmp_path: Path) -> None:
    model_dir = tmp_path / "repo" / "m"
    (model_dir / "2").mkdir(parents=True)
    (model_dir / "2" / "model.onnx").write_bytes(b"x")
    (model_dir / "1").mkdir()
    (model_dir / "1" / "model.onnx").symlink_to("../2/model.onnx")  # versions share a file
    assert inside(model_dir / "1", "model.onnx", "f", model_dir) == model_dir / "1/model.onnx"
    # the operator's layout may link a version folder to a store elsewhere
    store = tmp_path / "store" / "v3"
    store.mkdir(parents=True)
    (store / "model.onnx").write_bytes(b"x")
    (model_dir / "3").symlink_to(store)
    assert inside(model_dir / "3", "model.onnx", "f", model_dir) == model_dir / "3/model.onnx"


def test_a_link_loop_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(ConfigError, match="must stay inside"):
        inside(tmp_path, "a", "f")


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"default_model_filename": "/etc/shadow"}, "default_model_filename"),
        ({"default_model_filename": "../../other/1/model.onnx"}, "default_model_filename"),
        (
            {
                "model_warmup": [
                    {"inputs": {"x": {"data_type": "FP32", "input_data_file": "/etc/passwd"}}}
                ]
            },
            "model_warmup[0].inputs.x.input_data_file",
        ),
        (
            {"output": [{"name": "y", "data_type": "FP32", "dims": [1], "label_filename": "../l"}]},
            "output[0].label_filename",
        ),
        (
            {
                "sequence_batching": {
                    "state": [
                        {
                            "input_name": "s",
                            "output_name": "t",
                            "data_type": "FP32",
                            "dims": [1],
                            "initial_state": [{"data_file": "/etc/shadow"}],
                        }
                    ]
                }
            },
            "sequence_batching.state[0].initial_state[0].data_file",
        ),
    ],
)
def test_a_config_naming_a_file_outside_is_refused_when_read(
    raw: dict[str, object], field: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_dict(raw, "m", "load parameter 'config'")
    assert f"load parameter 'config': {field}: " in caught.value.message
    assert "(allowed: a relative path without '..'" in caught.value.message


def test_the_pbtxt_reader_refuses_them_too(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.pbtxt").write_text('default_model_filename: "/etc/passwd"\n')
    with pytest.raises(
        ConfigError, match=r"m/config\.pbtxt: default_model_filename: '/etc/passwd'"
    ):
        read_model_config(tmp_path / "m")


def test_planning_refuses_a_model_file_linked_from_outside(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    add_sub(repo)
    model = repo / "add_sub" / "1" / "model.onnx"
    outside = tmp_path / "outside.onnx"
    model.rename(outside)
    model.symlink_to(outside)  # a real ONNX model, outside the model's folder
    with pytest.raises(ConfigError, match=r"default_model_filename 'model\.onnx' must stay inside"):
        plan_model(repo / "add_sub")


def test_a_repository_scan_skips_folders_no_client_could_name(tmp_path: Path) -> None:
    (tmp_path / "good").mkdir()
    (tmp_path / "bad\nname").mkdir()
    assert [p.name for p in list_models(tmp_path)] == ["good"]


def test_no_file_name_is_the_folder_itself(tmp_path: Path) -> None:
    # an ensemble or a remote model has no model file: its version folder is all there is
    assert inside(tmp_path, "", "default_model_filename") == tmp_path
