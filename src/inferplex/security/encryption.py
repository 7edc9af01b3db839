"""Model encryption at rest: AES-256-GCM.

``inferplex encrypt`` writes ``MAGIC | nonce (12 bytes) | ciphertext + tag``; backends read
model files through :func:`read_model_bytes`, which decrypts in memory when the file starts
with the magic, so the plain model never touches the disk. The key (32 bytes, given as 64 hex
characters or raw bytes in a file) comes from ``INFERPLEX_MODEL_KEY`` or the file named by
``INFERPLEX_MODEL_KEY_FILE``; ``use_key`` sets it for the process (the server does, from its
flags). A wrong key or a damaged file is a clear load error.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from inferplex.errors import ConfigError

MAGIC = b"INFERPLEX-AESGCM1"
_NONCE = 12
KEY_BYTES = 32

_process_key: bytes | None = None


def generate_key() -> str:
    """A new random key, as the 64 hex characters the key settings accept."""
    return secrets.token_hex(KEY_BYTES)


def write_new_key(path: Path, overwrite: bool = False) -> bytes:
    """Generate a key and write it to ``path``, readable by its owner alone from the moment
    the file exists (created with mode 0600; a umask can only narrow that): never written
    first and restricted after. ConfigError if ``path`` exists (a file, a folder or a link)
    unless ``overwrite``; then the new key goes to a fresh 0600 file beside it that replaces
    the old one in one step (models encrypted with the old key can no longer be read)."""
    text = generate_key()
    target = Path(path)
    try:
        if not overwrite:
            _create_private(target, text)
        else:
            fresh = target.with_name(f".{target.name}.{secrets.token_hex(8)}.new")
            _create_private(fresh, text)
            try:
                os.replace(fresh, target)
            except OSError:
                fresh.unlink(missing_ok=True)
                raise
    except FileExistsError:
        raise ConfigError(
            f"'{target}' exists: refusing to overwrite a key (--overwrite-key replaces it)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot write the key to '{target}': {exc.strerror}") from None
    return parse_key(text, f"file '{target}'")


def _create_private(path: Path, text: str) -> None:
    """Create ``path`` (never an existing file or link: O_EXCL) with mode 0600 and write
    ``text`` to it; nothing is left behind if the write fails."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(text + "\n")
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def parse_key(text: str | bytes, where: str) -> bytes:
    """A key from its hex form (or 32 raw bytes from a file); ConfigError naming ``where``."""
    if isinstance(text, bytes):
        if len(text) == KEY_BYTES:
            return text
        text = text.decode("ascii", errors="replace")
    text = text.strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise ConfigError(
            f"the model key from {where} must be {KEY_BYTES * 2} hex characters "
            f"({KEY_BYTES} bytes, AES-256); `inferplex encrypt --new-key` makes one"
        )
    return key


def load_key(key: str | None = None, key_file: Path | None = None) -> bytes | None:
    """The key from an explicit value or file, else from the environment; None if none."""
    if key:
        return parse_key(key, "the model key setting")
    if key_file is not None:
        return parse_key(Path(key_file).read_bytes(), f"file '{key_file}'")
    if os.environ.get("INFERPLEX_MODEL_KEY"):
        return parse_key(os.environ["INFERPLEX_MODEL_KEY"], "INFERPLEX_MODEL_KEY")
    if os.environ.get("INFERPLEX_MODEL_KEY_FILE"):
        path = Path(os.environ["INFERPLEX_MODEL_KEY_FILE"])
        return parse_key(path.read_bytes(), f"file '{path}' (INFERPLEX_MODEL_KEY_FILE)")
    return None


def use_key(key: bytes | None) -> None:
    """Set the key this process decrypts models with (the server calls it at start)."""
    global _process_key
    _process_key = key


def process_key() -> bytes | None:
    """The key ``use_key`` set (worker processes of isolated models get it from the server)."""
    return _process_key


def encrypt_bytes(plain: bytes, key: bytes) -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = secrets.token_bytes(_NONCE)
    return MAGIC + nonce + AESGCM(key).encrypt(nonce, plain, MAGIC)


def is_encrypted(data: bytes) -> bool:
    return data.startswith(MAGIC)


def decrypt_bytes(data: bytes, key: bytes | None, name: str) -> bytes:
    """The plain bytes of an encrypted model; ConfigError naming ``name`` when there is no
    key or it is the wrong one."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if key is None:
        raise ConfigError(
            f"'{name}' is encrypted and no model key is set: give --model-key-file or "
            "INFERPLEX_MODEL_KEY / INFERPLEX_MODEL_KEY_FILE"
        )
    body = data[len(MAGIC) :]
    try:
        return AESGCM(key).decrypt(body[:_NONCE], body[_NONCE:], MAGIC)
    except InvalidTag:
        raise ConfigError(
            f"'{name}' could not be decrypted: wrong model key, or the file is damaged"
        ) from None


def read_model_bytes(path: Path) -> bytes:
    """A model file's plain bytes, decrypted in memory when it was encrypted."""
    data = Path(path).read_bytes()
    if is_encrypted(data):
        key = _process_key if _process_key is not None else load_key()
        return decrypt_bytes(data, key, str(path))
    return data


def encrypt_file(source: Path, target: Path, key: bytes) -> None:
    """Write the encrypted form of ``source`` to ``target`` (may be the same path)."""
    data = Path(source).read_bytes()
    if is_encrypted(data):
        raise ConfigError(f"'{source}' is already encrypted")
    Path(target).write_bytes(encrypt_bytes(data, key))


def model_source(path: Path) -> str | bytes:
    """What a runtime should load: the path of a plain model file (so formats with external
    data files keep working), or the decrypted bytes of an encrypted one."""
    with open(path, "rb") as file:
        head = file.read(len(MAGIC))
    return read_model_bytes(path) if head == MAGIC else str(path)
