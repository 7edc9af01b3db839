"""A reader for protobuf text format as Triton users write ``config.pbtxt``.

The result is plain nested dicts, untyped: enums (``TYPE_FP32``, ``KIND_CPU``) come back as
strings, ``true``/``false`` as bools, numbers as int or float. Types are checked later, once,
by :class:`~inferplex.config.model_config.ModelConfig`.

Whether a field is a list never depends on how often it appears in the file: every name in
:data:`REPEATED_FIELDS` (a repeated field or a map somewhere in Triton's
``model_config.proto``) always yields a list, every other name a single value, and giving a
single-valued field twice is an error, as it is for protobuf. Map fields come back as lists of
``{"key": ..., "value": ...}`` entries, exactly as they are written.

Accepted syntax, a superset of what protobuf's own text parser takes::

    name: "resnet"                      # strings in "..." or '...', with C escapes
    max_batch_size: 8;                  # ',' or ';' after a field is optional
    input [ { name: "in" dims: [ 3, -1 ] } ]     # lists, colon optional before '['
    dynamic_batching { preferred_batch_size: 4 preferred_batch_size: 8 }
    version_policy: { specific: { versions: [ 0x1, 3 ] } }   # ':' before '{' optional
    parameters { key: "k" value { string_value: "v" } }      # map entries

Errors are :class:`~inferplex.errors.ConfigError` with ``file:line:column:`` in front.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from inferplex.errors import ConfigError

#: Every repeated field and map of Triton's model_config.proto (names are unambiguous there:
#: no name is repeated in one message and single in another).
REPEATED_FIELDS = frozenset(
    # ModelConfig
    {"input", "output", "batch_input", "batch_output", "instance_group", "model_warmup"}
    | {"cc_model_filenames", "metric_tags", "parameters"}
    # tensors, reshape, version policy, instance groups
    | {"dims", "shape", "versions", "gpus", "secondary_devices", "profile", "resources"}
    # dynamic and sequence batching
    | {"preferred_batch_size", "priority_queue_policy", "control_input", "control", "state"}
    | {"int32_false_true", "fp32_false_true", "bool_false_true", "initial_state"}
    # batch inputs and outputs, ensembles, optimisation, warmup, agents, metrics
    | {"target_name", "source_input", "step", "input_map", "output_map", "graph_spec", "dim"}
    | {"gpu_execution_accelerator", "cpu_execution_accelerator", "inputs", "agents"}
    | {"op_library_filename", "metric_control", "buckets"}
    # inferplex's own sections: routing rules
    | {"rule", "max_dims"}
)

#: Nesting deeper than this is certainly not a model configuration; the limit keeps a hostile
#: file from exhausting the interpreter's recursion limit.
MAX_DEPTH = 64

# Strings are read by _read_string before this is tried: their escapes need more than a regex.
_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r\f\v]+|\#[^\n]*)
  | (?P<newline>\n)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>(?:0[xX][0-9A-Fa-f]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fF]?)
               [A-Za-z0-9_.]*)
  | (?P<punct>[{}\[\]<>:,;-])
    """,
    re.VERBOSE,
)
_FLOAT = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fF]?")
_SIMPLE_ESCAPES = {
    "a": 7,
    "b": 8,
    "f": 12,
    "n": 10,
    "r": 13,
    "t": 9,
    "v": 11,
    "\\": 92,
    "'": 39,
    '"': 34,
    "?": 63,
}
_CLOSING = {"{": "}", "<": ">"}
_TRUE = frozenset({"true", "True"})
_FALSE = frozenset({"false", "False"})
_FLOAT_WORDS = {"inf": math.inf, "infinity": math.inf, "nan": math.nan}


@dataclass(frozen=True)
class _Token:
    kind: str  # ident | number | string | punct | eof
    text: str  # the source text (for strings: the decoded value)
    line: int
    column: int


def parse_pbtxt(text: str, source: str = "config.pbtxt") -> dict[str, Any]:
    """Parse protobuf text format into nested dicts; ``source`` names the file in errors."""
    return _Parser(_tokenize(text, source), source).parse()


def _tokenize(text: str, source: str) -> list[_Token]:
    tokens: list[_Token] = []
    line, line_start, pos = 1, 0, 0
    while pos < len(text):
        column = pos - line_start + 1
        if text[pos] in "\"'":
            value, pos = _read_string(text, pos, source, line, column)
            tokens.append(_Token("string", value, line, column))
            continue
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ConfigError(f"{source}:{line}:{column}: unexpected character {text[pos]!r}")
        kind = match.lastgroup or ""
        pos = match.end()
        if kind == "newline":
            line, line_start = line + 1, pos
        elif kind != "space":
            tokens.append(_Token(kind, match.group(), line, column))
    tokens.append(_Token("eof", "end of file", line, len(text) - line_start + 1))
    return tokens


def _read_string(text: str, start: int, source: str, line: int, column: int) -> tuple[str, int]:
    """Decode the quoted string starting at ``start``; returns the value and the position after
    the closing quote. Escapes are C's, as protobuf reads them (octal and hex give bytes)."""
    quote = text[start]
    out = bytearray()
    pos = start + 1
    while pos < len(text) and text[pos] not in (quote, "\n"):
        if text[pos] == "\\":
            where = f"{source}:{line}:{column + pos - start}"
            pos = _read_escape(text, pos, out, where)
        else:
            out += text[pos].encode("utf-8", "surrogatepass")
            pos += 1
    if pos >= len(text) or text[pos] != quote:
        raise ConfigError(f"{source}:{line}:{column}: unterminated string (missing {quote})")
    try:
        return out.decode("utf-8"), pos + 1
    except UnicodeDecodeError:
        raise ConfigError(f"{source}:{line}:{column}: string is not valid UTF-8") from None


def _read_escape(text: str, pos: int, out: bytearray, where: str) -> int:
    """Append the bytes of the escape sequence at ``pos`` (a backslash); returns the position
    after it."""
    escape = text[pos + 1 : pos + 2]
    if escape in _SIMPLE_ESCAPES:
        out.append(_SIMPLE_ESCAPES[escape])
        return pos + 2
    octal = re.match(r"[0-7]{1,3}", text[pos + 1 : pos + 4])
    if octal is not None:
        if int(octal.group(), 8) > 255:
            raise ConfigError(f"{where}: octal escape \\{octal.group()} is above \\377")
        out.append(int(octal.group(), 8))
        return pos + 1 + len(octal.group())
    if escape in ("x", "X"):
        digits = re.match(r"[0-9A-Fa-f]{1,2}", text[pos + 2 : pos + 4])
        if digits is None:
            raise ConfigError(f"{where}: expected hex digits after \\{escape}")
        out.append(int(digits.group(), 16))
        return pos + 2 + len(digits.group())
    if escape in ("u", "U"):
        width = 4 if escape == "u" else 8
        digits = re.fullmatch(f"[0-9A-Fa-f]{{{width}}}", text[pos + 2 : pos + 2 + width])
        if digits is None or int(digits.group(), 16) > 0x10FFFF:
            raise ConfigError(
                f"{where}: expected {width} hex digits of a code point after \\{escape}"
            )
        out += chr(int(digits.group(), 16)).encode("utf-8", "surrogatepass")
        return pos + 2 + width
    shown = f"'{escape}'" if escape not in ("", "\n") else "end of line"
    raise ConfigError(f"{where}: unknown escape sequence: backslash followed by {shown}")


class _Parser:
    def __init__(self, tokens: list[_Token], source: str) -> None:
        self._tokens = tokens
        self._pos = 0
        self._source = source

    def parse(self) -> dict[str, Any]:
        return self._message(closing="", opened=None, depth=0)

    # ----------------------------------------------------------------- helpers
    def _peek(self) -> _Token:
        return self._tokens[self._pos]

    def _next(self) -> _Token:
        token = self._tokens[self._pos]
        if token.kind != "eof":
            self._pos += 1
        return token

    def _is(self, text: str) -> bool:
        token = self._peek()
        return token.kind == "punct" and token.text == text

    def _error(self, token: _Token, message: str) -> ConfigError:
        return ConfigError(f"{self._source}:{token.line}:{token.column}: {message}")

    @staticmethod
    def _show(token: _Token) -> str:
        if token.kind == "eof":
            return "end of file"
        if token.kind == "string":
            return f"string {token.text!r}"
        return f"'{token.text}'"

    # ----------------------------------------------------------------- grammar
    def _message(self, closing: str, opened: tuple[str, _Token] | None, depth: int) -> dict:
        if depth > MAX_DEPTH:
            raise self._error(self._peek(), f"messages nested deeper than {MAX_DEPTH} levels")
        fields: dict[str, Any] = {}
        first_seen: dict[str, _Token] = {}
        while True:
            token = self._peek()
            if token.kind == "eof":
                if not closing:
                    return fields
                assert opened is not None
                name, start = opened
                raise self._error(
                    token,
                    f"unexpected end of file: expected '{closing}' to close '{name}' "
                    f"opened at line {start.line}",
                )
            if closing and self._is(closing):
                self._next()
                return fields
            if token.kind != "ident":
                expected = f"a field name or '{closing}'" if closing else "a field name"
                raise self._error(token, f"expected {expected}, got {self._show(token)}")
            self._next()
            value, is_list = self._field_value(token, depth)
            self._store(fields, first_seen, token, value, is_list)
            if self._is(",") or self._is(";"):
                self._next()

    def _field_value(self, name: _Token, depth: int) -> tuple[Any, bool]:
        """The value after a field name; the flag tells whether it was written as a list."""
        has_colon = self._is(":")
        if has_colon:
            self._next()
        token = self._peek()
        if token.kind == "punct" and token.text in _CLOSING:
            self._next()
            return self._message(_CLOSING[token.text], (name.text, token), depth + 1), False
        if self._is("["):
            return self._list(name, depth), True
        if not has_colon:
            raise self._error(token, f"expected ':' or '{{' after '{name.text}'")
        return self._scalar(f"a value after '{name.text}:'"), False

    def _list(self, name: _Token, depth: int) -> list[Any]:
        opening = self._next()
        items: list[Any] = []
        while not self._is("]"):
            token = self._peek()
            if token.kind == "punct" and token.text in _CLOSING:
                self._next()
                items.append(self._message(_CLOSING[token.text], (name.text, token), depth + 1))
            elif token.kind != "eof":
                items.append(self._scalar(f"a value or ']' in the list of '{name.text}'"))
            token = self._peek()
            if token.kind == "eof":
                raise self._error(
                    token,
                    f"unexpected end of file: expected ']' to close the list of '{name.text}' "
                    f"opened at line {opening.line}",
                )
            if self._is(","):
                self._next()
            elif not self._is("]"):
                raise self._error(
                    token,
                    f"expected ',' or ']' in the list of '{name.text}', got {self._show(token)}",
                )
        self._next()
        return items

    def _scalar(self, expected: str) -> Any:
        token = self._next()
        if token.kind == "string":
            parts = [token.text]
            while self._peek().kind == "string":  # "a" "b" is one string, as in C
                parts.append(self._next().text)
            return "".join(parts)
        if token.kind == "ident":
            if token.text in _TRUE:
                return True
            if token.text in _FALSE:
                return False
            return token.text  # an enum value such as TYPE_FP32, or inf / nan
        negative = token.kind == "punct" and token.text == "-"
        if negative:
            token = self._next()
            if token.kind == "ident" and token.text.lower() in _FLOAT_WORDS:
                return -_FLOAT_WORDS[token.text.lower()]
        if token.kind == "number":
            value = self._number(token)
            return -value if negative else value
        if negative:
            raise self._error(token, f"expected a number after '-', got {self._show(token)}")
        raise self._error(token, f"expected {expected}, got {self._show(token)}")

    def _number(self, token: _Token) -> int | float:
        text = token.text
        if re.fullmatch(r"0[xX][0-9A-Fa-f]+", text):
            return int(text[2:], 16)
        if re.fullmatch(r"0[0-7]+", text):  # protobuf reads a leading 0 as octal
            return int(text, 8)
        if re.fullmatch(r"0|[1-9][0-9]*", text):
            return int(text)
        if _FLOAT.fullmatch(text) and not text.isdigit():  # "08" is neither octal nor float
            return float(text.rstrip("fF"))
        raise self._error(token, f"invalid number '{text}'")

    def _store(
        self,
        fields: dict[str, Any],
        first_seen: dict[str, _Token],
        name: _Token,
        value: Any,
        is_list: bool,
    ) -> None:
        key = name.text
        if key in REPEATED_FIELDS:
            fields.setdefault(key, []).extend(value if is_list else [value])
            return
        if key in fields:
            first = first_seen[key]
            raise self._error(
                name,
                f"'{key}' is set twice (first at line {first.line}); it is not a repeated field",
            )
        fields[key] = value
        first_seen[key] = name
