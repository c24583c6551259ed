"""Domain errors shared by the body store and the routing core.

Each error names the protocol-level failure it stands for; `kinference.api.status` maps them
to gRPC status codes in one place, so nothing below the API layer imports grpc.
"""

from __future__ import annotations


class PickerError(Exception):
    """Base of every failure the picker reports to a caller as a status."""

    code = ""  # a `kinference-error-code` for what the status alone does not tell ("": none)


class NotFound(PickerError):
    """Unknown, expired or already-released body or response id."""


class AlreadyConsumed(PickerError):
    """Pick named a stream id that an earlier Pick consumed."""


class InvalidArgument(PickerError):
    """Malformed request: id 0, a declared length that disagrees, bad metadata."""


class ResourceExhausted(PickerError):
    """A per-request or server-wide byte budget, or the per-chunk limit, was exceeded."""


class ServerBusy(ResourceExhausted):
    """The server-wide body budget (every body held together) was exceeded: unlike a body
    over the per-request limits, this one may fit once others are gone."""

    code = "server_busy"  # the `kinference-error-code` a caller sees (api/extensions.py)


class IdleTimeout(PickerError):
    """A PushBody stream sent nothing for longer than the inter-chunk budget."""


class Unavailable(PickerError):
    """The instance is draining and takes no new bodies."""
