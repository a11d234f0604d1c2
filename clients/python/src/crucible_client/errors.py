"""Exceptions raised by the client: one class per wire error code, plus client-side failures."""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

__all__ = [
    "CrucibleError",
    "BadRequest",
    "UnsupportedVersion",
    "UnknownOp",
    "UnknownTask",
    "UnknownEpisode",
    "EpisodeDone",
    "TooLarge",
    "InvalidArgument",
    "Busy",
    "ShuttingDown",
    "ServerInternalError",
    "CrucibleConnectionError",
    "CrucibleTimeout",
    "ProtocolError",
    "ERROR_CLASSES",
    "error_from_wire",
]


class CrucibleError(Exception):
    """An error reply from the server, or a client-side failure.

    `code` is the wire name (``"unknown_task"``, ``"timeout"``, ...) and `message` the
    human-readable text; `reply` is the full reply map when the error came from the server.
    """

    code: str = "internal"

    def __init__(self, code: Optional[str] = None, message: str = "",
                 reply: Optional[Dict[str, Any]] = None):
        if code is not None:
            self.code = code
        self.message = message
        self.reply = reply
        super().__init__(f"{self.code}: {message}" if message else self.code)


class BadRequest(CrucibleError):
    """The request was not a map, missed a field, or a field had the wrong type."""

    code = "bad_request"


class UnsupportedVersion(CrucibleError):
    """The request's `v` is not a protocol version this server speaks."""

    code = "unsupported_version"


class UnknownOp(CrucibleError):
    """The request's `op` is not one of the server's ops."""

    code = "unknown_op"


class UnknownTask(CrucibleError):
    """No task with that id is registered on the server."""

    code = "unknown_task"


class UnknownEpisode(CrucibleError):
    """The episode id was never issued, or the episode was closed or expired."""

    code = "unknown_episode"


class EpisodeDone(CrucibleError):
    """The episode already took its `max_steps` steps."""

    code = "episode_done"


class TooLarge(CrucibleError):
    """A frame, source, id or msgpack structure exceeded a protocol limit."""

    code = "too_large"


class InvalidArgument(CrucibleError):
    """A field had the right type but a value out of range (e.g. max_steps above the cap)."""

    code = "invalid_argument"


class Busy(CrucibleError):
    """The server is at capacity; retrying later is reasonable."""

    code = "busy"


class ShuttingDown(CrucibleError):
    """The server is draining and accepts no new work."""

    code = "shutting_down"


class ServerInternalError(CrucibleError):
    """The server failed while handling the request; it keeps serving others."""

    code = "internal"


class CrucibleConnectionError(CrucibleError, ConnectionError):
    """Client-side: the connection carrying the request was lost, or the client was closed."""

    code = "io"


class CrucibleTimeout(CrucibleError, TimeoutError):
    """Client-side: no reply arrived within the request's timeout."""

    code = "timeout"


class ProtocolError(CrucibleError):
    """Client-side: a reply did not follow the protocol (not a map, missing fields, wrong v)."""

    code = "protocol_error"


ERROR_CLASSES: Dict[str, Type[CrucibleError]] = {
    cls.code: cls
    for cls in (
        BadRequest,
        UnsupportedVersion,
        UnknownOp,
        UnknownTask,
        UnknownEpisode,
        EpisodeDone,
        TooLarge,
        InvalidArgument,
        Busy,
        ShuttingDown,
        ServerInternalError,
        CrucibleConnectionError,
        CrucibleTimeout,
    )
}


def error_from_wire(code: str, message: str, reply: Optional[Dict[str, Any]] = None
                    ) -> CrucibleError:
    """The exception for an error reply; a code this client does not know keeps its name."""
    cls = ERROR_CLASSES.get(code)
    if cls is None:
        return CrucibleError(code, message, reply)
    return cls(None, message, reply)
