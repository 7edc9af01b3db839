"""A chat request's ``messages``: each an object with a known role and its content as text
(a string, or text content parts joined with newlines as vLLM joins them for a template
that takes strings). Anything else is a 400 naming the message and its field."""

from __future__ import annotations

from typing import Any

from inferplex.protocol.openai.errors import FieldError

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
#: the fields a message may have; ``tool_calls`` and ``tool_call_id`` reach the template
_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "refusal"})


def read_messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise FieldError("messages", "'messages' must be a non-empty array of message objects")
    return [_message(i, m) for i, m in enumerate(value)]


def _message(index: int, value: Any) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(value, dict):
        raise FieldError(where, f"'{where}' must be an object with 'role' and 'content'")
    for key in value:
        if key not in _KEYS:
            raise FieldError(f"{where}.{key}", f"'{where}' has an unknown field '{key}'")
    role = value.get("role")
    if role not in ROLES:
        raise FieldError(
            f"{where}.role",
            f"'{where}.role' must be one of {', '.join(sorted(ROLES))}, got {role!r}",
        )
    message = dict(value)
    content = value.get("content")
    if content is None:
        if role != "assistant" or not value.get("tool_calls"):
            raise FieldError(f"{where}.content", f"'{where}.content' is required")
    else:
        message["content"] = _content(f"{where}.content", content)
    name = value.get("name")
    if name is not None and not isinstance(name, str):
        raise FieldError(f"{where}.name", f"'{where}.name' must be a string")
    return message


def _content(where: str, content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise FieldError(where, f"'{where}' must be a string or a non-empty array of parts")
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text":
            raise FieldError(
                f"{where}[{i}]",
                f"'{where}[{i}]': only text parts ({{'type': 'text', 'text': ...}}) are "
                f"supported, got {kind!r}",
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise FieldError(f"{where}[{i}].text", f"'{where}[{i}].text' must be a string")
        texts.append(text)
    return "\n".join(texts)
