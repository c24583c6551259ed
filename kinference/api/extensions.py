"""kinference's optional extensions of the protocol, carried in gRPC call metadata.

The spec keeps per-request data in metadata (BodyChunk may not grow fields), so these
travel there and the wire messages stay the spec's. A caller that sends none and ignores
the rest gets the plain protocol.

One extension is a service of its own instead: kinference.v1.PickerSession
(proto/kinference/v1/session.proto, kinference.api.session), many requests over one
stream; its answers carry the Pick keys below in a map, and its failures the same statuses
and `kinference-error-code`.

Caller -> picker, on PushBody:
  - `kinference-request-path`: the client's request path (with or without its query). Pick
    tells the request's API shape from it when it names one (`.../chat/completions`,
    `.../messages`, ...), and from the body alone otherwise (`kinference.requests.shapes`).

Caller -> picker, to spare a remote caller RPCs (each gRPC call costs grpc.aio a
fraction of a millisecond of CPU on each side; docs/operations.md):
  - `kinference-pick-bin`, on PushBody: a serialized PickRequest (its `body_stream_id` is
    ignored). The picker picks the body at the clean half-close, exactly as a Pick naming its
    stream id would, and answers in PushBody's trailing metadata (below), so the caller makes
    no Pick call; the stream id is consumed (a later Pick on it is FAILED_PRECONDITION). A
    picker without the extension ignores it and the caller picks as usual.
  - `kinference-inline-body-max`, on Pick or on a PushBody that picks: a byte count. When
    the pick dispatches a body of at most that many bytes (and at most `INLINE_BODY_LIMIT`),
    the body travels in the answer's trailing metadata (`kinference-body-bin`) and is
    released as if pulled: the caller makes no PullBody call (the spec lets it never call
    PullBody).
  - `kinference-first-token`, on ReportFinalToken: `TTFT_MS:UPSTREAM_STATUS[:AGO_MS]`, the
    ReportFirstToken the caller did not send separately (the spec lets it never call it),
    applied before the final report as if received AGO_MS milliseconds earlier (when the
    first token came), so the time from first token to final stays right. Send it only to
    a picker that answered a `kinference-pick-bin` PushBody (one that knows this key).

Picker -> caller, in Pick's trailing metadata (only the keys that apply), and in the
trailing metadata of a PushBody that picked:
  - `kinference-reason-code`: the outcome's reason as a code (`kinference.routing.reasons`:
    `unknown_model`, `no_ready_endpoint`, `tenant_budget`, ...); `PickResponse.reason`
    stays the human text, never to be parsed.
  - `kinference-retry-after`: whole seconds after which a retry can succeed, when known (a
    cooling provider's cooldown; for `tenant_budget`, when enough of the tenant's usage
    leaves its budget's minute for the gate to admit a request again).
  - `kinference-translated`: `WRITTEN:SENT`, two request shapes (`anthropic_messages:chat`):
    the body was rewritten from the client's API to the destination's, so the response
    comes back in SENT's API and is the caller's to translate back.
  - `kinference-upstream-path`: for a local pick, the path to send to, replacing the
    client's (a translated request goes to the other API's endpoint).
  - `kinference-usage-asked`: `true` on a translated stream whose client asked for a usage
    chunk (`stream_options.include_usage`); the translated stream ends with one only then.
  - `kinference-pick-bin` (a PushBody that picked only): the serialized PickResponse.
  - `kinference-body-bin`: the body to dispatch (`body_total_bytes` long), when the caller
    asked for it inline and it fits; PullBody on its response id is then NOT_FOUND.

Picker -> caller, in the trailing metadata of a failed call:
  - `kinference-error-code`: what the status alone does not tell, as a code:
    `server_busy` on RESOURCE_EXHAUSTED when the server-wide body budget was full (retry
    later, or elsewhere); absent when this body is over a per-request limit (never retry).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kinference.errors import PickerError
from kinference.requests.shapes import MAX_PATH_CHARS, Shape
from kinference.routing.reasons import Reason

REQUEST_PATH = "kinference-request-path"
REASON_CODE = "kinference-reason-code"
RETRY_AFTER = "kinference-retry-after"
TRANSLATED = "kinference-translated"
UPSTREAM_PATH = "kinference-upstream-path"
USAGE_ASKED = "kinference-usage-asked"
PICK = "kinference-pick-bin"
INLINE_BODY_MAX = "kinference-inline-body-max"
BODY = "kinference-body-bin"
FIRST_TOKEN = "kinference-first-token"
ERROR_CODE = "kinference-error-code"
# The largest body sent inline, whatever the caller asks: binary metadata travels base64'd
# in one HTTP/2 header block, and gRPC's default limit for a received one is 8 KiB, so a
# caller asking for more than ~5 KiB raises its channel's `grpc.max_metadata_size`.
INLINE_BODY_LIMIT = 32 * 1024

Metadata = Iterable[tuple[str, str | bytes]]
_CODES = {reason.value: reason for reason in Reason}
_SHAPES = {shape.value: shape for shape in Shape}


@dataclass(frozen=True, slots=True)
class PickExtras:
    """What Pick's trailing metadata said, typed; the defaults mean "nothing said"."""

    code: Reason = Reason.NONE
    retry_after_s: int | None = None
    translated: tuple[Shape, Shape] | None = None
    upstream_path: str = ""
    usage_asked: bool = False
    body: bytes | None = None  # the body to dispatch, sent inline (no PullBody)


@dataclass(frozen=True, slots=True)
class CallerAsks:
    """What a caller asked of a PushBody or Pick through the extensions above."""

    pick: bytes | None = None  # a serialized PickRequest: pick at the half-close
    inline_body_max: int = 0  # 0: no body inline
    # (ttft ms, upstream status, ms since the first token came), on a final report
    first_token: tuple[int, int, int] | None = None


_NO_ASKS = CallerAsks()  # what a call asking nothing gets (most calls): not built anew


def caller_asks(metadata: Metadata | None) -> CallerAsks:
    """The extensions asked for in a call's metadata (malformed values are ignored)."""
    pick, inline, first = None, 0, None
    for key, value in metadata or ():
        if key == PICK and isinstance(value, bytes):
            pick = value
        elif key == INLINE_BODY_MAX:
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            inline = min(int(text), INLINE_BODY_LIMIT) if _count(text) else 0
        elif key == FIRST_TOKEN:
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            ttft, _, rest = text.partition(":")
            status, _, ago = rest.partition(":")
            if _count(ttft) and _count(status) and (not ago or _count(ago)):
                first = (min(int(ttft), 2**32 - 1), min(int(status), 999), int(ago or 0))
    if pick is None and not inline and first is None:
        return _NO_ASKS
    return CallerAsks(pick, inline, first)


def _count(text: str) -> bool:
    return text.isdigit() and text.isascii() and len(text) <= 10


def request_path(metadata: Metadata | None) -> str:
    """The `kinference-request-path` of PushBody's metadata, or "" (absent or unusable)."""
    for key, value in metadata or ():
        if key == REQUEST_PATH:
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            return text if usable_path(text) else ""
    return ""


def usable_path(text: str) -> bool:
    """A path hint worth reading: absolute, printable, not longer than any endpoint's."""
    return text.startswith("/") and len(text) <= MAX_PATH_CHARS and text.isprintable()


def pick_metadata(extras: PickExtras) -> list[tuple[str, str]]:
    """The trailing metadata that says `extras` (empty when there is nothing to say)."""
    metadata: list[tuple[str, str]] = []
    if extras.code is not Reason.NONE:
        metadata.append((REASON_CODE, extras.code.value))
    if extras.retry_after_s is not None:
        metadata.append((RETRY_AFTER, str(extras.retry_after_s)))
    if extras.translated is not None:
        written, sent = extras.translated
        metadata.append((TRANSLATED, f"{written.value}:{sent.value}"))
    if extras.upstream_path:
        metadata.append((UPSTREAM_PATH, extras.upstream_path))
    if extras.usage_asked:
        metadata.append((USAGE_ASKED, "true"))
    return metadata


def read_pick_metadata(metadata: Metadata | None) -> PickExtras:
    """The extras in Pick's trailing metadata; unknown keys and values are ignored."""
    code, retry_after, translated, path, usage = Reason.NONE, None, None, "", False
    body: bytes | None = None
    for key, value in metadata or ():
        if key == BODY and isinstance(value, bytes):
            body = value
            continue
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        if key == REASON_CODE:
            code = _CODES.get(text, Reason.OTHER)
        elif key == RETRY_AFTER and text.isdigit() and text.isascii():
            retry_after = int(text)
        elif key == TRANSLATED:
            written, _, sent = text.partition(":")
            if written in _SHAPES and sent in _SHAPES:
                translated = (_SHAPES[written], _SHAPES[sent])
        elif key == UPSTREAM_PATH and text.startswith("/"):
            path = text
        elif key == USAGE_ASKED:
            usage = text == "true"
    return PickExtras(code, retry_after, translated, path, usage, body)


def error_metadata(error: PickerError) -> list[tuple[str, str]]:
    """The trailing metadata of a call failed with `error` (its code, when it has one)."""
    return [(ERROR_CODE, error.code)] if error.code else []


def error_code(metadata: Metadata | None) -> str:
    """The `kinference-error-code` of a failed call's trailing metadata, or ""."""
    for key, value in metadata or ():
        if key == ERROR_CODE:
            return value.decode("latin-1") if isinstance(value, bytes) else value
    return ""
