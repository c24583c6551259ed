"""A pick and what its answer carries, for every servicer that answers one (Picker's Pick,
a PushBody that picks, a PickerSession request)."""

from __future__ import annotations

from dataclasses import dataclass

from kinference.api import convert, extensions
from kinference.service import PickCall, PickerService
from kinference.v1 import picker_pb2 as pb


@dataclass(frozen=True, slots=True)
class Answer:
    """The PickResponse, the extensions Pick's trailing metadata carries, and the body
    when it went inline (already released, as a completed PullBody releases it)."""

    response: pb.PickResponse
    metadata: list[tuple[str, str]]
    body: bytes | None


async def answer(service: PickerService, call: PickCall, inline_body_max: int) -> Answer:
    """The pick of `call`; a dispatched body of at most `inline_body_max` bytes inline."""
    result = await service.pick_off_loop(call)
    extras = convert.pick_extras(result)
    metadata = extensions.pick_metadata(extras) if extras is not None else []
    body = None
    if result.response_id and 0 < result.body_total_bytes <= inline_body_max:
        body = inline_body(service, result.response_id)
    return Answer(convert.pick_response(result), metadata, body)


def inline_body(service: PickerService, response_id: int) -> bytes:
    """The parked body of `response_id`, whole, released as a completed PullBody is."""
    pull = service.open_pull(response_id)
    try:
        return b"".join(pull.messages())
    finally:
        service.close_pull(pull, completed=True)
