"""Rewrite a request body for its destination by splicing member spans, never re-serialising.

What a plan changes (and only when the request needs it):

- `model` set to `plan.model` when given and different;
- on a streaming CHAT or COMPLETION request with `plan.include_usage`: `stream_options`
  gets `"include_usage": true` (the member is added, or the key set inside the existing
  object, whose other keys stay);
- on a CHAT request with `plan.max_tokens_field`: the other of max_tokens /
  max_completion_tokens is renamed to it; when the target field is already set too, the
  other one is dropped (the target's value wins). Completions, responses and Anthropic
  bodies each have only one valid spelling, so they are left alone;
- our `kinference` member is always removed: it is never forwarded;
- with `plan.sent_shape` naming another API than the body's (Anthropic Messages <-> OpenAI
  chat), the members are translated (`kinference.requests.translation`): every member the
  translation changes, drops or adds is spliced, the others stay as they were. A body with
  a member too large to parse at Pick (over `STRICT_PARSE_BYTES`) is loaded for it only up
  to `MAX_TRANSLATED_BYTES`, else `Untranslatable`.

An untouched body is returned as is (the same object). A touched one is `Body.spliced` from
edits on the member spans the scanner found (a body parsed whole is scanned here, on demand),
so every untouched byte is shared with the original and only replacement bytes are new. With
repeated keys, the last occurrence is the one that counts (as for `json.loads`): it is the one
edited, and removal or renaming removes every occurrence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from kinference.bodies import Body
from kinference.records import record
from kinference.requests.fields import LargeValue, member_keys
from kinference.requests.members import ascii_members
from kinference.requests.parse import HINT_FIELD, InferenceRequest
from kinference.requests.shapes import Shape
from kinference.requests.spans import Member
from kinference.requests.splice import Changes, addition, edits
from kinference.requests.translation import Untranslatable, translate

MaxTokensField = Literal["max_tokens", "max_completion_tokens"]

_INCLUDE_USAGE = b'{"include_usage":true}'
_USAGE_SHAPES = (Shape.CHAT, Shape.COMPLETION)
# A translated body is parsed whole at Pick; one larger than this is not translated.
MAX_TRANSLATED_BYTES = 16 * 1024 * 1024
_ABSENT = object()  # a member the request does not have


@record
class RewritePlan:
    """What the destination needs changed in the body; the default changes nothing."""

    model: str | None = None
    include_usage: bool = False
    max_tokens_field: MaxTokensField | None = None
    sent_shape: Shape | None = None  # the API the destination speaks, when not the body's


@dataclass(frozen=True, slots=True)
class Translation:
    """A request's members translated to `sent`, before the destination's model is set: each
    key of the translated request in its order, with its JSON (None: the value as written).

    The heavy part of a translation (every large value parsed, the result serialised):
    computed by `translation`, in the parse worker for a body with large values
    (`heavy_translation`), so that Pick only splices it."""

    sent: Shape
    members: dict[str, bytes | None]


def rewrite(
    body: Body,
    request: InferenceRequest,
    plan: RewritePlan,
    translated: Translation | Untranslatable | None = None,
) -> Body:
    """`body` rewritten by `plan` for `request` (parsed from it); the same object if untouched.
    `translated`: the translation to `plan.sent_shape` computed ahead (`translation`), or
    why there is none; computed here when not given.

    Raises `Untranslatable` when the plan asks for a translation the body cannot take."""
    sent = plan.sent_shape
    if sent is not None and sent is not request.shape:
        if isinstance(translated, Untranslatable):
            raise translated
        if translated is None or translated.sent is not sent:
            translated = translation(body, request, sent)
        changes = _translated(request, translated, plan.model)
    else:
        changes = _changes(request, plan)
    if not changes:
        return body
    if changes.only_added():  # the usual stream: a member appended, no span needed
        end = _closing_brace(body, request)
        if end is not None:
            return body.spliced([addition(changes.added, bool(request.fields.values), end)])
    members, close_at = _members(body, request)
    return body.spliced(edits(changes, members, close_at))


def _closing_brace(body: Body, request: InferenceRequest) -> int | None:
    """The offset of a body's closing brace when it was parsed whole (so it is one valid
    object): its last byte but whitespace. None for a scanned body (its members are known)."""
    if request.fields.open_at >= 0 or len(body.pieces) != 1:
        return None
    raw = body.pieces[0]
    if not isinstance(raw, bytes):
        return None
    end = len(raw.rstrip(b" \t\n\r")) - 1
    return end if end >= 0 and raw[end] == 0x7D else None  # "}"


def heavy_translation(body: Body, request: InferenceRequest) -> bool:
    """Whether translating `request` parses values Pick has not (large ones, a body at most
    MAX_TRANSLATED_BYTES): work for the parse worker, not the loop."""
    values = request.fields.values.values()
    return body.size <= MAX_TRANSLATED_BYTES and any(isinstance(v, LargeValue) for v in values)


def translation(body: Body, request: InferenceRequest, sent: Shape) -> Translation:
    """`request`'s members translated to `sent`; raises Untranslatable."""
    values = _loaded_values(body, request)
    translated = translate(values, request.shape, sent)
    return Translation(
        sent,
        {
            key: None if key in values and _same(value, values[key]) else _dumps(value)
            for key, value in translated.items()
        },
    )


def _translated(request: InferenceRequest, translated: Translation, model: str | None) -> Changes:
    values = request.fields.values
    members = dict(translated.members)
    if model is not None:  # set as the translation's last step: in place, or added last
        written = values.get("model", _ABSENT)
        members["model"] = None if _same(model, written) else _dumps(model)
    changes = Changes()
    for key in values:
        if key not in members:
            changes.dropped.add(key)
        elif (value := members[key]) is not None:
            changes.values[key] = value
    for key, value in members.items():
        if key not in values:
            assert value is not None  # a member the request did not have is new JSON
            changes.added.append((key, value))
    return changes


def _same(value: object, written: object) -> bool:
    return value is written or value == written


def _changes(request: InferenceRequest, plan: RewritePlan) -> Changes:
    values = request.fields.values
    changes = Changes()
    if HINT_FIELD in values:
        changes.dropped.add(HINT_FIELD)
    if plan.model is not None and plan.model != request.model:
        changes.values["model"] = json.dumps(plan.model).encode()
    if plan.include_usage and request.stream and request.shape in _USAGE_SHAPES:
        _include_usage(values, changes)
    if plan.max_tokens_field is not None and request.shape is Shape.CHAT:
        _rename_max_tokens(values, plan.max_tokens_field, changes)
    return changes


def _loaded_values(body: Body, request: InferenceRequest) -> dict[str, object]:
    """Every top-level value parsed, large ones included (up to MAX_TRANSLATED_BYTES)."""
    values = request.fields.values
    large = {key: value for key, value in values.items() if isinstance(value, LargeValue)}
    if not large:
        return values
    if body.size > MAX_TRANSLATED_BYTES:
        raise Untranslatable(
            f"the body is over the {MAX_TRANSLATED_BYTES}-byte limit of a translated request"
        )
    loaded = dict(values)
    for key, value in large.items():
        loaded[key] = json.loads(body.read_span(value.start, value.end))
    return loaded


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _include_usage(values: dict[str, object], changes: Changes) -> None:
    options = values.get("stream_options")
    if isinstance(options, dict):  # parse_request allows only an object or null
        if options.get("include_usage") is not True:
            merged = {**options, "include_usage": True}
            changes.values["stream_options"] = json.dumps(merged).encode()
    elif "stream_options" in values:  # null
        changes.values["stream_options"] = _INCLUDE_USAGE
    else:
        changes.added.append(("stream_options", _INCLUDE_USAGE))


def _rename_max_tokens(values: dict[str, object], target: str, changes: Changes) -> None:
    source = "max_tokens" if target == "max_completion_tokens" else "max_completion_tokens"
    if source not in values:
        return
    if values.get(target) is not None:  # both set: the target's spelling and value win
        changes.dropped.add(source)
        return
    if target in values:  # a null target makes way for the renamed source
        changes.dropped.add(target)
    changes.renames[source] = target
    changes.repeats_dropped.add(source)


def _members(body: Body, request: InferenceRequest) -> tuple[list[tuple[str, Member]], int]:
    """Every member with its key, in body order, and the offset of the closing brace."""
    fields = request.fields
    if fields.open_at >= 0:  # the body was scanned: spans are known
        return list(fields.members), fields.close_at
    if len(body.pieces) == 1 and isinstance(body.pieces[0], bytes):
        found = ascii_members(body.pieces[0])  # parsed whole: find the spans at C speed
        if found is not None:
            return found
    members, scanner = member_keys(body)  # else scan it now (small by construction)
    return members, scanner.close_at
