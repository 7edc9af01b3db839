"""The config.pbtxt reader: Triton's documented examples, list-ness and enums from the compiled
schema, every piece of syntax, every error with its position, and properties on random input."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplex.config.pbtxt import MAX_DEPTH, is_repeated, model_config_schema, parse_pbtxt
from inferplex.errors import ConfigError

# --------------------------------------------------------------------------- Triton's examples
# Verbatim from Triton's docs/user_guide/model_configuration.md and batcher.md.

MINIMAL = """
  platform: "tensorrt_plan"
  max_batch_size: 8
  input [
    {
      name: "input0"
      data_type: TYPE_FP32
      dims: [ 16 ]
    },
    {
      name: "input1"
      data_type: TYPE_FP32
      dims: [ 16 ]
    }
  ]
  output [
    {
      name: "output0"
      data_type: TYPE_FP32
      dims: [ 16 ]
    }
  ]
"""


def test_minimal_configuration_from_tritons_docs() -> None:
    assert parse_pbtxt(MINIMAL) == {
        "platform": "tensorrt_plan",
        "max_batch_size": 8,
        "input": [
            {"name": "input0", "data_type": "TYPE_FP32", "dims": [16]},
            {"name": "input1", "data_type": "TYPE_FP32", "dims": [16]},
        ],
        "output": [{"name": "output0", "data_type": "TYPE_FP32", "dims": [16]}],
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version_policy: { all: {}}", {"version_policy": {"all": {}}}),
        (
            "version_policy: { latest: { num_versions: 2}}",
            {"version_policy": {"latest": {"num_versions": 2}}},
        ),
        (
            "version_policy: { specific: { versions: [1,3]}}",
            {"version_policy": {"specific": {"versions": [1, 3]}}},
        ),
        ("version_policy: { all { }}", {"version_policy": {"all": {}}}),
        ("response_cache {\n  enable: true\n}", {"response_cache": {"enable": True}}),
        ("dynamic_batching { }", {"dynamic_batching": {}}),
        (
            "dynamic_batching {\n    preferred_batch_size: [ 4, 8 ]\n"
            "    max_queue_delay_microseconds: 100\n  }",
            {
                "dynamic_batching": {
                    "preferred_batch_size": [4, 8],
                    "max_queue_delay_microseconds": 100,
                }
            },
        ),
        (
            '  input [\n    {\n      name: "in"\n      dims: [ 1 ]\n'
            "      reshape: { shape: [ ] }\n    }\n  ]",
            {"input": [{"name": "in", "dims": [1], "reshape": {"shape": []}}]},
        ),
        (
            "  instance_group [\n    {\n      count: 1\n      kind: KIND_GPU\n"
            "      gpus: [ 0 ]\n    },\n    {\n      count: 2\n      kind: KIND_GPU\n"
            "      gpus: [ 1, 2 ]\n    }\n  ]",
            {
                "instance_group": [
                    {"count": 1, "kind": "KIND_GPU", "gpus": [0]},
                    {"count": 2, "kind": "KIND_GPU", "gpus": [1, 2]},
                ]
            },
        ),
        (
            'cc_model_filenames [\n  {\n    key: "7.5"\n    value: "resnet50_T4.plan"\n  },\n'
            '  {\n    key: "8.0"\n    value: "resnet50_A100.plan"\n  }\n]',
            {
                "cc_model_filenames": [
                    {"key": "7.5", "value": "resnet50_T4.plan"},
                    {"key": "8.0", "value": "resnet50_A100.plan"},
                ]
            },
        ),
    ],
)
def test_snippets_from_tritons_docs(text: str, expected: dict[str, Any]) -> None:
    assert parse_pbtxt(text) == expected


def test_rate_limiter_example_with_capitalised_true() -> None:
    text = """
  instance_group [
    {
      count: 1
      kind: KIND_GPU
      gpus: [ 0, 1, 2 ]
      rate_limiter {
        resources [
          {
            name: "R1"
            count: 4
          },
          {
            name: "R2"
            global: True
            count: 2
          }
        ]
        priority: 2
      }
    }
  ]
"""
    group = parse_pbtxt(text)["instance_group"][0]
    assert group["rate_limiter"] == {
        "resources": [
            {"name": "R1", "count": 4},
            {"name": "R2", "global": True, "count": 2},
        ],
        "priority": 2,
    }


def test_maps_come_back_as_key_value_entries() -> None:
    text = """
parameters { key: "EXECUTION_ENV_PATH"
  value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }
parameters: { key: "threads", value { string_value: "2" } }
dynamic_batching {
  priority_levels: 2
  priority_queue_policy { key: 1 value: { timeout_action: DELAY max_queue_size: 8 } }
  priority_queue_policy [ { key: 2, value { allow_timeout_override: true } } ]
}
"""
    parsed = parse_pbtxt(text)
    assert parsed["parameters"] == [
        {
            "key": "EXECUTION_ENV_PATH",
            "value": {"string_value": "$$TRITON_MODEL_DIRECTORY/env.tar.gz"},
        },
        {"key": "threads", "value": {"string_value": "2"}},
    ]
    assert parsed["dynamic_batching"]["priority_queue_policy"] == [
        {"key": 1, "value": {"timeout_action": "DELAY", "max_queue_size": 8}},
        {"key": 2, "value": {"allow_timeout_override": True}},
    ]


# --------------------------------------------------------------------------- lists, from the schema


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("dims: 16", [16]),
        ("dims: [ 16 ]", [16]),
        ("dims: 3 dims: 4", [3, 4]),
        ("dims: [ 3 ] dims: 4 dims: [ 5, 6 ]", [3, 4, 5, 6]),
        ("dims [ 3, 4 ]", [3, 4]),
        ("dims: [ ]", []),
        ("dims: [ 3, 4, ]", [3, 4]),
    ],
)
def test_repeated_scalars_are_lists_however_written(text: str, expected: list[int]) -> None:
    assert parse_pbtxt(f"input {{ {text} }}") == {"input": [{"dims": expected}]}


@pytest.mark.parametrize(
    "text",
    [
        'input { name: "a" }',
        'input: { name: "a" }',
        'input [ { name: "a" } ]',
        'input: [ { name: "a" } ]',
        'input < name: "a" >',
        'input: [ < name: "a" > ]',
    ],
)
def test_a_single_repeated_message_is_a_list_of_one(text: str) -> None:
    assert parse_pbtxt(text) == {"input": [{"name": "a"}]}


def test_repeated_messages_collect_in_order() -> None:
    text = 'output { name: "a" } output [ { name: "b" }, { name: "c" } ] output { name: "d" }'
    assert [o["name"] for o in parse_pbtxt(text)["output"]] == ["a", "b", "c", "d"]


def _schema_fields(descriptor: Any, seen: set[str] | None = None):
    """(message, field) for every field of every message the schema's ModelConfig reaches."""
    seen = set() if seen is None else seen
    if descriptor.full_name in seen:
        return
    seen.add(descriptor.full_name)
    for field in descriptor.fields:
        yield descriptor, field
        if field.message_type is not None:
            yield from _schema_fields(field.message_type, seen)


def _path_to(target: Any) -> list[str]:
    """Field names from ModelConfig down to the message ``target``."""
    queue: list[tuple[Any, list[str]]] = [(model_config_schema(), [])]
    seen: set[str] = set()
    while queue:
        message, path = queue.pop(0)
        if message.full_name == target.full_name:
            return path
        seen.add(message.full_name)
        for field in message.fields:
            if field.message_type is not None and field.message_type.full_name not in seen:
                queue.append((field.message_type, [*path, field.name]))
    raise AssertionError(target.full_name)


def test_every_repeated_field_of_the_schema_is_a_list_and_no_other_is() -> None:
    """Written once, each field of each message comes back as a list exactly when the compiled
    schema (Triton's model_config.proto) declares it repeated or a map."""
    checked = 0
    for message, field in _schema_fields(model_config_schema()):
        if message.GetOptions().map_entry:
            continue
        path = _path_to(message)
        value = "{ }" if field.message_type is not None else ": 1"
        text = f"{field.name} {value}"
        for name in reversed(path):
            text = f"{name} {{ {text} }}"
        parsed: Any = parse_pbtxt(text)
        for name in path:
            parsed = parsed[name]
            parsed = parsed[0] if isinstance(parsed, list) else parsed
        assert isinstance(parsed[field.name], list) == is_repeated(field), field.full_name
        checked += 1
    assert checked > 150


def test_enum_numbers_come_back_as_names() -> None:
    text = """
    input { data_type: 11 format: 2 }
    instance_group { kind: 2 }
    dynamic_batching { priority_queue_policy { key: 1 value { timeout_action: 1 } } }
    input { data_type: 99 }
    """
    parsed = parse_pbtxt(text)
    assert parsed["input"] == [
        {"data_type": "TYPE_FP32", "format": "FORMAT_NCHW"},
        {"data_type": 99},  # not a value of the enum: ModelConfig says so
    ]
    assert parsed["instance_group"] == [{"kind": "KIND_CPU"}]
    assert parsed["dynamic_batching"]["priority_queue_policy"][0]["value"] == {
        "timeout_action": "DELAY"
    }


def test_inferplex_sections_are_in_the_schema() -> None:
    text = """
    scheduling { weight: 2 slo_p99_ms: 5.5 adaptive_batching: true nice: 3 }
    cascade { light_model: "s" heavy_model: "b" confidence_output: "p" confidence: max
              threshold: 0.9 }
    size_routing { input_name: "x" rule [ { model_name: "a" max_dims: 64 }, { model_name: "b" } ] }
    """
    parsed = parse_pbtxt(text)
    assert parsed["size_routing"]["rule"] == [
        {"model_name": "a", "max_dims": [64]},
        {"model_name": "b"},
    ]
    assert parsed["cascade"]["confidence"] == "max"
    assert parsed["scheduling"] == {
        "weight": 2,
        "slo_p99_ms": 5.5,
        "adaptive_batching": True,
        "nice": 3,
    }


def test_names_the_schema_lacks_are_kept_as_written() -> None:
    """A typo is not fatal: readers.py lists it as an unknown field. Nothing in the schema says
    whether it repeats, so a name given twice keeps both values."""
    text = 'max_batchsize: 8 input { name: "a" dim: [ 2 ] } extra { a: 1 a: 2 b { c: "d" } }'
    assert parse_pbtxt(text) == {
        "max_batchsize": 8,
        "input": [{"name": "a", "dim": [2]}],
        "extra": {"a": [1, 2], "b": {"c": "d"}},
    }
    assert parse_pbtxt("something: [ 1, 2 ] something: 3") == {"something": [1, 2, 3]}


def test_values_are_kept_as_written_for_model_config_to_check() -> None:
    """The reader does not check a value against its field's type: ModelConfig does, with the
    same messages for config.pbtxt and config.yaml (test_readers.py)."""
    text = 'max_batch_size: "x" platform: onnxruntime_onnx parameters { key: "k" value: "v" }'
    assert parse_pbtxt(text) == {
        "max_batch_size": "x",
        "platform": "onnxruntime_onnx",
        "parameters": [{"key": "k", "value": "v"}],
    }


# --------------------------------------------------------------------------- scalars


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("0", 0),
        ("42", 42),
        ("-7", -7),
        ("- 7", -7),
        ("0x1F", 31),
        ("0XfF", 255),
        ("-0x10", -16),
        ("017", 15),
        ("18446744073709551616", 2**64),
        ("1.5", 1.5),
        ("-2.25", -2.25),
        (".5", 0.5),
        ("5.", 5.0),
        ("1e3", 1000.0),
        ("1.5E-2", 0.015),
        ("2.5f", 2.5),
        ("3F", 3.0),
        ("-inf", -math.inf),
        ("-Infinity", -math.inf),
        ("true", True),
        ("True", True),
        ("false", False),
        ("False", False),
        ("TYPE_FP32", "TYPE_FP32"),
        ("KIND_CPU", "KIND_CPU"),
        ("inf", "inf"),  # a bare word stays a word; a float field converts it
    ],
)
def test_scalar_values(literal: str, value: Any) -> None:
    parsed = parse_pbtxt(f"x: {literal}")["x"]
    assert parsed == value
    assert type(parsed) is type(value)


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ('"plain"', "plain"),
        ("'single'", "single"),
        ('"it\'s"', "it's"),
        ("'say \"hi\"'", 'say "hi"'),
        (r'"tab\there"', "tab\there"),
        (r'"a\nb\rc"', "a\nb\rc"),
        (r'"\a\b\f\v\?"', "\a\b\f\v?"),
        (r'"back\\slash"', "back\\slash"),
        (r'"q\"q\'q"', "q\"q'q"),
        (r'"\101\102"', "AB"),
        (r'"\0"', "\x00"),
        (r'"\x41\x4a"', "AJ"),
        (r'"\303\251"', "é"),  # octal escapes are bytes, decoded as UTF-8
        (r'"\xc3\xa9"', "é"),
        (r'"\u00e9"', "é"),
        (r'"\U0001F600"', "\U0001f600"),
        ('"naïve ✓"', "naïve ✓"),
        ('"a" "b" \'c\'', "abc"),
        ('""', ""),
        ('"# not a comment"', "# not a comment"),
    ],
)
def test_strings_and_escapes(literal: str, value: str) -> None:
    assert parse_pbtxt(f"s: {literal}") == {"s": value}


def test_comments_and_separators() -> None:
    text = """
# a comment line
name: "m"   # trailing comment
max_batch_size: 4;
platform: "p",
input [ { name: "a"; dims: [ 1 ], }, { name: "b" } ]  # list of messages
"""
    assert parse_pbtxt(text) == {
        "name": "m",
        "max_batch_size": 4,
        "platform": "p",
        "input": [{"name": "a", "dims": [1]}, {"name": "b"}],
    }


@pytest.mark.parametrize("text", ["", "   \n\n", "# only a comment\n"])
def test_an_empty_file_is_an_empty_message(text: str) -> None:
    assert parse_pbtxt(text) == {}


def test_windows_line_endings() -> None:
    assert parse_pbtxt('name: "m"\r\nmax_batch_size: 2\r\n') == {"name": "m", "max_batch_size": 2}


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dims 16", "config.pbtxt:1:6: expected ':' or '{' after 'dims'"),
        ('name: "a"\n\n  dims\n  }', "config.pbtxt:4:3: expected ':' or '{' after 'dims'"),
        ("name:", "config.pbtxt:1:6: expected a value after 'name:', got end of file"),
        ("name: }", "config.pbtxt:1:7: expected a value after 'name:', got '}'"),
        (
            'input {\n  name: "a"\n',
            "config.pbtxt:3:1: unexpected end of file: expected '}' to close 'input' "
            "opened at line 1",
        ),
        ("a < b: 1 }", "config.pbtxt:1:10: expected a field name or '>', got '}'"),
        (
            "dims: [ 1, 2",
            "config.pbtxt:1:13: unexpected end of file: expected ']' to close the list of "
            "'dims' opened at line 1",
        ),
        ("dims: [ 1 2 ]", "config.pbtxt:1:11: expected ',' or ']' in the list of 'dims', got '2'"),
        ("dims: [ , ]", "config.pbtxt:1:9: expected a value or ']' in the list of 'dims', got ','"),
        (
            "dims: [ [ 1 ] ]",
            "config.pbtxt:1:9: expected a value or ']' in the list of 'dims', got '['",
        ),
        ("}", "config.pbtxt:1:1: expected a field name, got '}'"),
        ('"name": 1', "config.pbtxt:1:1: expected a field name, got '\"name\"'"),
        ("12: 1", "config.pbtxt:1:1: expected a field name, got '12'"),
        (
            'name: "a" name: "b"',
            "config.pbtxt:1:11: 'name' is set twice (first at line 1); it is not a repeated field",
        ),
        (
            "max_batch_size: 1\nmax_batch_size: 2",
            "config.pbtxt:2:1: 'max_batch_size' is set twice (first at line 1); "
            "it is not a repeated field",
        ),
        (
            "dynamic_batching { }\ndynamic_batching { }",
            "config.pbtxt:2:1: 'dynamic_batching' is set twice (first at line 1); "
            "it is not a repeated field",
        ),
        ("a: 08", "config.pbtxt:1:4: invalid number '08'"),
        ("a: 12abc", "config.pbtxt:1:4: invalid number '12abc'"),
        ("a: 0x", "config.pbtxt:1:4: invalid number '0x'"),
        ("a: 1.2.3", "config.pbtxt:1:4: invalid number '1.2.3'"),
        ("a: -x", "config.pbtxt:1:4: invalid number '-x'"),
        ("a: - x", "config.pbtxt:1:6: expected a number after '-', got 'x'"),
        ("a: --1", "config.pbtxt:1:4: invalid number '--1'"),
        ('a: "abc', 'config.pbtxt:1:4: unterminated string (missing ")'),
        ("a: 'abc\"\n'", "config.pbtxt:1:4: unterminated string (missing ')"),
        (r'a: "\q"', "config.pbtxt:1:4: unknown escape sequence: backslash followed by 'q'"),
        (r'a: "\x"', "config.pbtxt:1:4: expected hex digits after \\x"),
        (r'a: "\u12"', "config.pbtxt:1:4: expected 4 hex digits of a code point after \\u"),
        (r'a: "\U00110000"', "config.pbtxt:1:4: expected 8 hex digits of a code point after \\U"),
        (r'a: "ok\777"', "config.pbtxt:1:4: octal escape \\777 is above \\377"),
        (r'a: "\xff"', "config.pbtxt:1:4: string is not valid UTF-8"),
        ("a: 1 @", "config.pbtxt:1:6: expected a field name, got '@'"),
        ("a: 1\n  b: 2 $", "config.pbtxt:2:8: expected a field name, got '$'"),
        ("[ext]: 1", "config.pbtxt:1:1: expected a field name, got '['"),
    ],
)
def test_errors_say_where_and_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_pbtxt(text)
    assert str(info.value) == message


def test_errors_name_the_given_source() -> None:
    with pytest.raises(ConfigError, match=r"^add_sub/config\.pbtxt:1:6: "):
        parse_pbtxt("dims 16", "add_sub/config.pbtxt")


def test_deep_nesting_is_refused_not_a_crash() -> None:
    depth = MAX_DEPTH + 5
    text = "a { " * depth + "}" * depth
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_pbtxt(text)
    ok = "a { " * MAX_DEPTH + "}" * MAX_DEPTH
    assert parse_pbtxt(ok)


def test_errors_are_invalid_argument() -> None:
    with pytest.raises(ConfigError) as info:
        parse_pbtxt("{")
    assert info.value.code.value == "invalid_argument"


# --------------------------------------------------------------------------- properties

_PBTXT_ALPHABET = st.sampled_from([*"{}[]<>:;,-.'\"\\#\n \t_aeEfxX019", "true", "dims", "input"])


@settings(max_examples=400)
@given(st.one_of(st.text(), st.lists(_PBTXT_ALPHABET, max_size=60).map("".join)))
def test_random_text_gives_a_dict_or_a_config_error(text: str) -> None:
    try:
        result = parse_pbtxt(text)
    except ConfigError as exc:
        assert re.match(r"config\.pbtxt:\d+:\d+: ", str(exc))
    else:
        assert isinstance(result, dict)


def _all_names() -> set[str]:
    return {field.name for _, field in _schema_fields(model_config_schema())}


_RESERVED = {"true", "false", "True", "False", "inf", "infinity", "nan"}
# names the schema does not have: nothing but the text says what they hold
_IDENT = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: s not in _RESERVED and s not in _all_names()
)
_SCALAR = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.text(max_size=12),
    _IDENT.map(str.upper),  # an enum value, written bare
)


def _message(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    single = st.dictionaries(_IDENT, children, max_size=4)
    repeated = st.dictionaries(_IDENT, st.lists(children, max_size=3), max_size=2)
    return st.tuples(single, repeated).map(lambda pair: {**pair[0], **pair[1]})


_MESSAGES = st.recursive(
    _message(_SCALAR), lambda children: _message(st.one_of(_SCALAR, children)), max_leaves=20
)


def _render(value: Any) -> str:
    """A value in protobuf text format, written in the many ways the reader accepts."""
    if isinstance(value, dict):
        return "{ " + " ".join(_render_field(k, v) for k, v in value.items()) + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if re.fullmatch(r"[A-Z_][A-Z0-9_]*", value):
        return value
    escaped = "".join(
        f"\\{c}" if c in "\\\"'" else f"\\{ord(c):03o}" if ord(c) < 32 else c for c in value
    )
    return f'"{escaped}"'


def _render_field(key: str, value: Any) -> str:
    if isinstance(value, list):
        return f"{key}: [ " + ", ".join(_render(v) for v in value) + " ]"
    if isinstance(value, dict):
        return f"{key} {_render(value)}"
    return f"{key}: {_render(value)};"


@settings(max_examples=300)
@given(_MESSAGES)
def test_rendered_messages_read_back_equal(message: dict[str, Any]) -> None:
    text = " ".join(_render_field(k, v) for k, v in message.items())
    assert parse_pbtxt(text) == message
