"""CurveZMQ keys for a server started with `--server-key` and `--client-keys`.

Key files are the ones `crucible keys new BASE` writes: `BASE.key` (this side's pair: lines
`public-key = <z85>` and `secret-key = <z85>`, mode 0600) and `BASE.pub` (the public key, for
the other side). Lines starting with `#` are comments (Z85 itself uses `#`, so only a line that
starts with it is one). `new_key_pair` writes the same files from Python.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional, Union

import zmq

_Z85 = set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")
PathLike = Union[str, "os.PathLike[str]"]


class KeyPair(NamedTuple):
    public: str  # Z85
    secret: str  # Z85


def is_z85_key(text: str) -> bool:
    return len(text) == 40 and set(text) <= _Z85


def _key_lines(path: Path) -> Dict[str, str]:
    keys: Dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        name, key = ("", text)
        if "=" in text and not is_z85_key(text):
            name, _, key = (part.strip() for part in text.partition("="))
            key = key.strip('"')
        if not is_z85_key(key):
            raise ValueError(f"key file {path}: line {number} does not hold a key (40 Z85 "
                             f"characters, as `crucible keys new` writes)")
        keys.setdefault(name or "public-key", key)
    return keys


def read_key_pair(path: PathLike) -> KeyPair:
    """The pair in a `.key` file (ValueError naming the file when it is not one)."""
    keys = _key_lines(Path(path))
    if "secret-key" not in keys or "public-key" not in keys:
        raise ValueError(f"key file {path}: needs `public-key = ...` and `secret-key = ...` "
                         f"lines (a .pub file holds only the public key)")
    return KeyPair(keys["public-key"], keys["secret-key"])


def read_public_key(key_or_path: PathLike) -> str:
    """A public key given as its 40 Z85 characters or as a file holding one (`.pub`, `.key`)."""
    if isinstance(key_or_path, str) and is_z85_key(key_or_path):
        return key_or_path
    keys = _key_lines(Path(key_or_path))
    if "public-key" not in keys:
        raise ValueError(f"key file {key_or_path}: no public key in it")
    return keys["public-key"]


def new_key_pair(base: PathLike) -> KeyPair:
    """Writes BASE.key (mode 0600) and BASE.pub, as `crucible keys new BASE` does; never
    overwrites a file."""
    public, secret = (k.decode() for k in zmq.curve_keypair())
    base = Path(base)
    secret_path, public_path = Path(f"{base}.key"), Path(f"{base}.pub")
    for path in (secret_path, public_path):
        if path.exists():
            raise FileExistsError(f"{path} exists; not overwritten")
    fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f"# crucible CurveZMQ key pair: keep this file secret\n"
                  f"public-key = {public}\nsecret-key = {secret}\n")
    public_path.write_text(f"# crucible CurveZMQ public key: give it to the other side\n"
                           f"public-key = {public}\n")
    return KeyPair(public, secret)


def apply(sock: Any, server_key: Optional[PathLike], client_key: Optional[PathLike]) -> None:
    """Sets a client socket up for a Curve server: `server_key` is the server's public key (Z85
    or a file), `client_key` this client's `.key` file (or a KeyPair). Both or neither."""
    if server_key is None and client_key is None:
        return
    if server_key is None or client_key is None:
        raise ValueError("a Curve server needs both server_key (its public key) and client_key "
                         "(this client's .key file)")
    pair = client_key if isinstance(client_key, KeyPair) else read_key_pair(client_key)
    sock.setsockopt(zmq.CURVE_SERVERKEY, read_public_key(server_key).encode())
    sock.setsockopt(zmq.CURVE_PUBLICKEY, pair.public.encode())
    sock.setsockopt(zmq.CURVE_SECRETKEY, pair.secret.encode())
