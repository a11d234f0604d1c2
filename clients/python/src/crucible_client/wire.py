"""Protocol v1 framing: request encoding, reply decoding and validation, shared by all clients."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import msgpack

from .errors import ProtocolError, TooLarge, error_from_wire

PROTOCOL_VERSION = 1
DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"

# Documented server limits (docs/protocol.md). The client checks the ones it can before
# sending, so an oversized request fails here with a clear error instead of being dropped
# by the server's transport.
MAX_FRAME_BYTES = 1 << 20
MAX_SOURCE_BYTES = 256 << 10
MAX_ID_BYTES = 128
MAX_STEPS_CAP = 10000
# Request tags (`tag` on reset, step and score): a map of string keys to strings or integers,
# echoed in the reply and kept in the trajectory log.
MAX_TAG_KEYS = 8
MAX_TAG_KEY_BYTES = 32
MAX_TAG_VALUE_BYTES = 256
TAGGED_OPS = ("reset", "step", "score")
_INT64_MIN = -(1 << 63)
_UINT64_MAX = (1 << 64) - 1

TagValue = Union[str, int]
Tag = Mapping[str, TagValue]
# The model check of a step (docs/models.md): a model name, or {"name": ..., <variable>: value}.
ModelChoice = Union[str, Mapping[str, Any]]

OPS = ("hello", "tasks", "task", "reset", "step", "score", "close", "stats")
STATUSES = (
    "ok",
    "invalid_action",
    "compile_error",
    "launch_error",
    "runtime_error",
    "timeout",
    "incorrect",
    "hack_detected",
    "infra_error",
)
# Keys every reply carries; `body()` strips them.
ENVELOPE_KEYS = ("v", "id", "ok")

RequestId = Union[int, str]


def encode_request(
    request_id: RequestId,
    op: str,
    fields: Mapping[str, Any],
    max_frame_bytes: Union[int, None] = MAX_FRAME_BYTES,
) -> bytes:
    """One msgpack map {v, id, op, **fields}; fields whose value is None are left out.

    A `tag` field is checked against the tag limits (`check_tag`: TypeError, ValueError).
    Raises TooLarge when the encoded frame exceeds `max_frame_bytes` (None disables the check).
    """
    request: Dict[str, Any] = {"v": PROTOCOL_VERSION, "id": request_id, "op": op}
    for key, value in fields.items():
        if value is None:
            continue
        if key in request:
            raise ValueError(f"field {key!r} is part of the envelope and cannot be set")
        request[key] = check_tag(value) if key == "tag" else value
    frame: bytes = msgpack.packb(request, use_bin_type=True)
    if max_frame_bytes is not None and len(frame) > max_frame_bytes:
        raise TooLarge(
            None,
            f"request frame is {len(frame)} bytes; the server accepts at most {max_frame_bytes} "
            "(checked by the client, not sent)",
        )
    return frame


def decode_frames(frames: Sequence[bytes]) -> Any:
    """The msgpack object carried by one reply message.

    A DEALER receives the reply as a single frame; empty delimiter frames in front of it
    (REQ-style envelopes) are tolerated. Raises ProtocolError for anything else.
    """
    payload: List[bytes] = [bytes(f) for f in frames]
    while len(payload) > 1 and not payload[0]:
        payload.pop(0)
    if len(payload) != 1:
        raise ProtocolError(None, f"a reply must be one frame, got {len(payload)}")
    try:
        # A str that is not UTF-8 (a server older than this client, or a broken one) is read
        # with U+FFFD in place of the bad bytes, so the reply still reaches its request.
        return msgpack.unpackb(payload[0], raw=False, strict_map_key=False,
                               unicode_errors="replace")
    except Exception as exc:  # msgpack raises several unrelated types for bad bytes
        raise ProtocolError(None, f"reply is not valid msgpack: {exc}") from None


def reply_id(reply: Any) -> Union[RequestId, None]:
    """The id a decoded reply answers, or None when it has no usable id."""
    if not isinstance(reply, dict):
        return None
    rid = reply.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (int, str)):
        return None
    return rid


def check_reply(reply: Any) -> Dict[str, Any]:
    """Validates a reply matched to a request: returns it if ok, else raises.

    Error replies become the CrucibleError subclass for their code; a reply that breaks the
    envelope (wrong v, `ok` not a bool, malformed `error`) raises ProtocolError.
    """
    if not isinstance(reply, dict):
        raise ProtocolError(None, f"a reply must be a map, got {type(reply).__name__}")
    version = reply.get("v")
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise ProtocolError(None, f"reply has protocol version {version!r}; expected 1", reply)
    ok = reply.get("ok")
    if ok is True:
        return reply
    if ok is not False:
        raise ProtocolError(None, f"reply field 'ok' must be a boolean, got {ok!r}", reply)
    error = reply.get("error")
    if not isinstance(error, dict):
        raise ProtocolError(None, "error reply has no 'error' map", reply)
    code, message = error.get("code"), error.get("message", "")
    if not isinstance(code, str) or not isinstance(message, str):
        raise ProtocolError(None, "error reply needs string 'code' and 'message'", reply)
    raise error_from_wire(code, message, reply)


def check_tag(tag: Any) -> Dict[str, TagValue]:
    """A request tag as it will be sent: a dict of at most 8 non-empty string keys of at most
    32 bytes, each mapped to a string of at most 256 bytes or a 64-bit integer.

    Raises TypeError for a wrong type (a bool is not an integer here) and ValueError for a
    limit, naming the key, so a bad tag fails before it is sent.
    """
    if not isinstance(tag, Mapping):
        raise TypeError(f"tag must be a map of strings to strings or integers, got "
                        f"{type(tag).__name__}")
    if len(tag) > MAX_TAG_KEYS:
        raise ValueError(f"tag has {len(tag)} keys; at most {MAX_TAG_KEYS} are allowed")
    checked: Dict[str, TagValue] = {}
    for key, value in tag.items():
        if not isinstance(key, str):
            raise TypeError(f"tag keys must be strings, got {type(key).__name__} {key!r}")
        if not key:
            raise ValueError("tag keys must not be empty")
        if len(key.encode("utf-8")) > MAX_TAG_KEY_BYTES:
            raise ValueError(f"tag key {key[:40]!r} is over {MAX_TAG_KEY_BYTES} bytes")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise TypeError(f"tag value of {key!r} must be a string or an integer, got "
                            f"{type(value).__name__}")
        if isinstance(value, str) and len(value.encode("utf-8")) > MAX_TAG_VALUE_BYTES:
            raise ValueError(f"tag value of {key!r} is over {MAX_TAG_VALUE_BYTES} bytes")
        if isinstance(value, int) and not _INT64_MIN <= value <= _UINT64_MAX:
            raise ValueError(f"tag value of {key!r} does not fit in 64 bits")
        checked[key] = value
    return checked


def merge_tags(*tags: Optional[Tag]) -> Optional[Dict[str, TagValue]]:
    """The tags merged left to right (later keys win), checked; None when all are None."""
    merged: Dict[str, TagValue] = {}
    given = False
    for tag in tags:
        if tag is None:
            continue
        given = True
        merged.update(check_tag(tag))
    return check_tag(merged) if given else None


def body(reply: Mapping[str, Any]) -> Dict[str, Any]:
    """A reply without its envelope keys (v, id, ok)."""
    return {k: v for k, v in reply.items() if k not in ENVELOPE_KEYS}


def source_text(source: Union[str, bytes]) -> str:
    """Sources travel as msgpack strings; bytes are decoded as UTF-8."""
    if isinstance(source, (bytes, bytearray)):
        return bytes(source).decode("utf-8")
    if not isinstance(source, str):
        raise TypeError(f"source must be str or bytes, got {type(source).__name__}")
    return source
