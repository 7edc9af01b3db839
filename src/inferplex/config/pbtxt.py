"""Reading Triton's ``config.pbtxt`` (protobuf text format) against the compiled schema.

The schema is ``proto/model_config.proto`` (Triton's model_config.proto with inferplex's own
sections), compiled by scripts/gen_proto.sh into ``model_config.desc`` beside this file. The
text is cut into tokens by protobuf's own text-format tokenizer (``text_format.Tokenizer``:
comments, separators, numbers as protobuf reads them), and the compiled ``ModelConfig`` says
what each field is:

- a repeated field or a map always comes back as a list, however often the file writes it
  (``dims: 16`` is ``[16]``; maps as they are written, ``{"key": ..., "value": ...}``
  entries); every other field as one value, and giving one twice is an error, as it is for
  protobuf;
- an enum field written as a number comes back as its name (``data_type: 11`` is
  ``"TYPE_FP32"``); other values as written: strings, ints, floats, ``true``/``false`` as
  bools, enum names and other bare words as strings.

Values are checked once, later, by :class:`~inferplex.config.model_config.ModelConfig`: the
same checks with the same messages as a ``config.yaml`` gets. A name the schema does not have
(a typo) is kept as written, for section_reader.py to list as an unknown field rather than fail the
load. Both are why this is not ``text_format.Parse`` into a ModelConfig message: protobuf stops
at the first unknown field, and proto3 cannot tell a field written as its zero value from one
left out (``max_batch_size: 0`` says "never batch"; leaving it out lets auto-complete choose).

Accepted syntax is protobuf's::

    name: "resnet"                      # strings in "..." or '...', with C escapes
    max_batch_size: 8;                  # ',' or ';' after a field is optional
    input [ { name: "in" dims: [ 3, -1 ] } ]     # lists; ':' optional before a message
    dynamic_batching { preferred_batch_size: 4 preferred_batch_size: 8 }
    version_policy: < specific: { versions: [ 0x1, 3 ] } >
    parameters { key: "k" value { string_value: "v" } }      # map entries

Errors are :class:`~inferplex.errors.ConfigError` with ``file:line:column:`` in front.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from inferplex.errors import ConfigError

#: Nesting deeper than this is certainly not a model configuration; the limit keeps a hostile
#: file from exhausting the interpreter's recursion limit.
MAX_DEPTH = 64

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DECIMAL = re.compile(r"[-+]?[0-9]+")
_CLOSING = {"{": "}", "<": ">"}
_WORDS = {"true": True, "True": True, "false": False, "False": False}
# C's escapes, as protobuf's C++ parser (Triton's) reads them; octal and hex give bytes
_ESCAPE = re.compile(
    r"""\\(?: (?P<simple>[abfnrtv\\'"?]) | (?P<octal>[0-7]{1,3}) | [xX](?P<hex>[0-9A-Fa-f]{1,2})
            | u(?P<u>[0-9A-Fa-f]{4}) | U(?P<U>[0-9A-Fa-f]{8}) | (?P<bad>.?) )""",
    re.VERBOSE | re.DOTALL,
)
_SIMPLE = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}


@functools.cache
def model_config_schema() -> Descriptor:
    """The compiled ``inference.ModelConfig``, in a private descriptor pool (tritonclient
    registers its own ``inference.*`` in protobuf's default one)."""
    data = resources.files(__package__).joinpath("model_config.desc").read_bytes()
    pool = descriptor_pool.DescriptorPool()
    for file_proto in descriptor_pb2.FileDescriptorSet.FromString(data).file:
        pool.Add(file_proto)
    return pool.FindMessageTypeByName("inference.ModelConfig")


def parse_pbtxt(text: str, source: str = "config.pbtxt") -> dict[str, Any]:
    """Parse a config.pbtxt into nested dicts; ``source`` names the file in errors."""
    lines = text.split("\n")
    try:
        return _Reader(text_format.Tokenizer(lines)).message(model_config_schema(), None, 0)
    except text_format.ParseError as exc:
        # the tokenizer's own errors carry "LINE:COLUMN : 'the line': " in front
        message = str(exc).split(" : ", 1)[-1]
        line, column = exc.GetLine() or 1, exc.GetColumn() or 1
        current = lines[line - 1] if line <= len(lines) else ""
        message = message.removeprefix(f"'{current}': ")
        raise ConfigError(f"{source}:{line}:{column}: {message}") from None


def is_repeated(field: FieldDescriptor) -> bool:
    """Whether a field is repeated (or a map); protobuf 7 dropped ``label``."""
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return bool(repeated)
    return field.label == FieldDescriptor.LABEL_REPEATED


class _Reader:
    def __init__(self, tokenizer: text_format.Tokenizer) -> None:
        self._t = tokenizer

    def _error(self, message: str) -> text_format.ParseError:
        """An error at the current token."""
        return text_format.ParseError(message, *self._where())

    def _where(self) -> tuple[int, int]:
        """Line and column of the current token."""
        here = self._t.ParseError("")
        return here.GetLine() or 1, here.GetColumn() or 1

    def _shown(self) -> str:
        token = self._t.token
        return "end of file" if not token else f"'{token}'"

    def message(
        self, schema: Descriptor | None, opened: tuple[str, str, int] | None, depth: int
    ) -> dict[str, Any]:
        """The fields up to ``opened``'s closing token (name, closing, line), or to the end of
        the file; ``schema`` None: a message the schema does not describe."""
        if depth > MAX_DEPTH:
            raise self._error(f"messages nested deeper than {MAX_DEPTH} levels")
        fields: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        t = self._t
        while not self._closed(opened):
            if not _NAME.fullmatch(t.token):
                closing = f" or '{opened[1]}'" if opened else ""
                raise self._error(f"expected a field name{closing}, got {self._shown()}")
            name, (line, column) = t.token, self._where()
            t.NextToken()
            field = schema.fields_by_name.get(name) if schema is not None else None
            value, is_list = self._field_value(name, field, depth)
            values = value if is_list else [value]
            if field is not None and is_repeated(field):
                fields.setdefault(name, []).extend(values)
            elif name not in fields:
                fields[name], first_line[name] = value, line
            elif field is not None:
                raise text_format.ParseError(
                    f"'{name}' is set twice (first at line {first_line[name]}); it is not a "
                    "repeated field",
                    line,
                    column,
                )
            else:  # not in the schema: whether it repeats is unknown, so keep every value
                earlier = fields[name]
                fields[name] = [*(earlier if isinstance(earlier, list) else [earlier]), *values]
            if not t.TryConsume(","):
                t.TryConsume(";")
        return fields

    def _closed(self, opened: tuple[str, str, int] | None) -> bool:
        """Whether the message ends here (its closing token is consumed)."""
        t = self._t
        if opened is None:
            return bool(t.AtEnd())
        if t.TryConsume(opened[1]):
            return True
        if t.AtEnd():
            name, closing, line = opened
            raise self._error(
                f"unexpected end of file: expected '{closing}' to close '{name}' "
                f"opened at line {line}"
            )
        return False

    def _field_value(
        self, name: str, field: FieldDescriptor | None, depth: int
    ) -> tuple[Any, bool]:
        """The value after a field name; the flag tells whether it was written as a list."""
        t = self._t
        has_colon = t.TryConsume(":")
        if t.token in _CLOSING:
            return self._nested(name, field, depth), False
        if t.token == "[":
            return self._list(name, field, depth), True
        if not has_colon:
            raise self._error(f"expected ':' or '{{' after '{name}'")
        return self._scalar(field, f"a value after '{name}:'"), False

    def _nested(self, name: str, field: FieldDescriptor | None, depth: int) -> dict[str, Any]:
        schema = field.message_type if field is not None else None
        opened = (name, _CLOSING[self._t.token], self._where()[0])
        self._t.NextToken()
        return self.message(schema, opened, depth + 1)

    def _list(self, name: str, field: FieldDescriptor | None, depth: int) -> list[Any]:
        t = self._t
        line = self._where()[0]
        t.NextToken()
        items: list[Any] = []
        while not t.TryConsume("]"):
            if t.token in _CLOSING:
                items.append(self._nested(name, field, depth))
            elif t.token:
                items.append(self._scalar(field, f"a value or ']' in the list of '{name}'"))
            if t.AtEnd():
                raise self._error(
                    f"unexpected end of file: expected ']' to close the list of '{name}' "
                    f"opened at line {line}"
                )
            if not t.TryConsume(",") and t.token != "]":
                raise self._error(
                    f"expected ',' or ']' in the list of '{name}', got {self._shown()}"
                )
        return items

    def _scalar(self, field: FieldDescriptor | None, expected: str) -> Any:
        t = self._t
        token = t.token
        if token[:1] in ("'", '"'):
            parts = []
            while t.token[:1] in ("'", '"'):  # "a" "b" is one string, as in C
                parts.append(self._string(t.token))
                t.NextToken()
            return "".join(parts)
        if _NAME.fullmatch(token):
            t.NextToken()
            return _WORDS.get(token, token)  # enum values such as TYPE_FP32 stay names
        if token == "-":  # "- 7": protobuf's tokenizer makes "-" a token of its own
            t.NextToken()
            word = t.token.lower() in ("inf", "infinity", "nan")
            if not word and not (t.token[:1].isdigit() or t.token[:1] == "."):
                raise self._error(f"expected a number after '-', got {self._shown()}")
            token = "-" + t.token
        if not token or not (token[0].isdigit() or token[0] in ".-+"):
            raise self._error(f"expected {expected}, got {self._shown()}")
        value = self._number(token)
        t.NextToken()
        if isinstance(value, int) and field is not None and field.enum_type is not None:
            named = field.enum_type.values_by_number.get(value)
            return named.name if named is not None else value
        return value

    def _number(self, token: str) -> int | float:
        if _DECIMAL.fullmatch(token) and not re.fullmatch(r"[-+]?0[0-9]+", token):
            return int(token)  # any size: ModelConfig checks the range
        for signed in (True, False):
            try:
                return text_format.ParseInteger(token, is_signed=signed, is_long=True)
            except ValueError:
                pass
        if not _DECIMAL.fullmatch(token):  # "08" is neither octal nor a float
            try:
                return text_format.ParseFloat(token)
            except ValueError:
                pass
        raise self._error(f"invalid number '{token}'")

    def _string(self, token: str) -> str:
        """A quoted string token's value; escapes as protobuf's C++ parser reads them
        (protobuf's Python one passes unknown escapes through)."""
        quote = token[0]
        if len(token) < 2 or token[-1] != quote:
            raise self._error(f"unterminated string (missing {quote})")
        body = token[1:-1]
        out = bytearray()
        position = 0
        for match in _ESCAPE.finditer(body):
            out += body[position : match.start()].encode("utf-8", "surrogatepass")
            position = match.end()
            out += self._escape(match)
        out += body[position:].encode("utf-8", "surrogatepass")
        try:
            return out.decode("utf-8")
        except UnicodeDecodeError:
            raise self._error("string is not valid UTF-8") from None

    def _escape(self, match: re.Match[str]) -> bytes:
        simple, octal, hex_, u, big_u = match.group("simple", "octal", "hex", "u", "U")
        if simple is not None:
            return bytes([_SIMPLE.get(simple, ord(simple))])
        if octal is not None:
            if int(octal, 8) > 255:
                raise self._error(f"octal escape \\{octal} is above \\377")
            return bytes([int(octal, 8)])
        if hex_ is not None:
            return bytes([int(hex_, 16)])
        code = u or big_u
        if code is not None and int(code, 16) <= 0x10FFFF:
            return chr(int(code, 16)).encode("utf-8", "surrogatepass")
        bad = match.group("bad")
        if code is not None or bad in ("u", "U"):
            width = 4 if (code and len(code) == 4) or bad == "u" else 8
            letter = "u" if width == 4 else "U"
            raise self._error(f"expected {width} hex digits of a code point after \\{letter}")
        if bad in ("x", "X"):
            raise self._error(f"expected hex digits after \\{bad}")
        shown = f"'{bad}'" if bad else "end of string"
        raise self._error(f"unknown escape sequence: backslash followed by {shown}")
