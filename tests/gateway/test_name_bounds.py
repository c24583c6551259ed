"""Names the gateway and the picker both bound, each bound one constant of theirs: a name at
the bound is taken by both, one past it by neither (kinference.config.fields)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from kinference.api import convert
from kinference.app import App
from kinference.config import PolicyError, parse_policy
from kinference.config.fields import MAX_MODEL_CHARS
from kinference.gateway.local import LocalPicker
from kinference.gateway.metrics import OTHER, ModelLabels
from kinference.gateway.port import PickAsk
from kinference.gateway.settings import GatewaySettings
from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import ResponseMeter
from kinference.routing.reasons import Reason
from kinference.settings import Settings
from kinference.v1 import picker_pb2 as pb

LONGEST = "m" * MAX_MODEL_CHARS
TOO_LONG = LONGEST + "m"
# The longest pool ref: a DNS label (63) / a DNS name (253: four labels and three dots).
NAMESPACE = "n" * 63
NAME = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])


def policy_text(model: str, namespace: str = "default", name: str = "chat") -> str:
    return f"""
pools:
  - namespace: "{namespace}"
    name: "{name}"
    endpoints: ["10.0.0.5:8000"]
    models: ["{model}"]
"""


@pytest.fixture
async def picker() -> AsyncIterator[LocalPicker]:
    """The picker the gateway hosts, serving the longest model name in the longest pool."""
    app = App(Settings(), parse_policy(policy_text(LONGEST, NAMESPACE, NAME)), CollectorRegistry())
    try:
        yield LocalPicker(
            app.service, idle_timeout_s=10.0, model_names=lambda: (), serving=lambda: True
        )
    finally:
        await app.close()


async def pick(picker: LocalPicker, model: str, pool: tuple[str, str] | None) -> pb.PickResponse:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    stream = await picker.push(
        [body], declared_length=len(body), client_request_id="", request_path=""
    )
    response, extras = await picker.pick(stream, PickAsk("", pb.PickRequest.INTERACTIVE, pool, ""))
    assert response.outcome == pb.PickResponse.OK or extras.code is Reason.UNKNOWN_MODEL
    return response


def served(model: str) -> str:
    """The served model name the gateway takes from a response naming `model`."""
    meter = ResponseMeter(event_stream=False, clock=TokenClock())
    meter.feed(json.dumps({"model": model, "choices": []}).encode())
    return meter.finish().model


async def test_a_model_name_at_the_bound_is_served_and_metered(picker: LocalPicker) -> None:
    assert len(LONGEST) == MAX_MODEL_CHARS
    assert (await pick(picker, LONGEST, None)).local.endpoint == "10.0.0.5:8000"
    assert served(LONGEST) == LONGEST
    assert ModelLabels().label(LONGEST, dispatched=True) == LONGEST


async def test_a_model_name_past_the_bound_is_taken_by_neither(picker: LocalPicker) -> None:
    with pytest.raises(PolicyError, match=f"at most {MAX_MODEL_CHARS} characters"):
        parse_policy(policy_text(TOO_LONG))
    assert (await pick(picker, TOO_LONG, None)).outcome == pb.PickResponse.NO_WORKERS
    assert served(TOO_LONG) == ""  # the requested model is reported instead
    assert ModelLabels().label(TOO_LONG, dispatched=True) == OTHER


async def test_the_longest_pool_ref_is_named_by_both(picker: LocalPicker) -> None:
    assert len(NAMESPACE) == 63 and len(NAME) == 253
    settings = GatewaySettings(pool=f"{NAMESPACE}/{NAME}")
    response = await pick(picker, LONGEST, settings.pool_ref)
    assert response.local.endpoint == "10.0.0.5:8000"


@pytest.mark.parametrize(
    ("namespace", "name"), [(NAMESPACE + "n", NAME), (NAMESPACE, NAME + "d"), ("-x", "chat")]
)
def test_a_pool_ref_the_policy_cannot_name_is_refused_by_both(namespace: str, name: str) -> None:
    with pytest.raises(PolicyError):
        parse_policy(policy_text("m", namespace, name))
    with pytest.raises(ValueError, match="expected"):
        GatewaySettings(pool=f"{namespace}/{name}")


def test_a_client_request_id_is_cut_at_one_bound_on_every_path() -> None:
    longest, too_long = "r" * convert.MAX_REQUEST_ID_CHARS, "r" * (convert.MAX_REQUEST_ID_CHARS + 1)
    assert convert.request_id_of(longest) == convert.request_id_of(too_long) == longest
    assert convert.push_metadata([(convert.CLIENT_REQUEST_ID, too_long)])[1] == longest
    call = convert.pick_call_of(
        1, qos_class=pb.PickRequest.INTERACTIVE, tenant="", pool=None, client_request_id=too_long
    )
    assert call.client_request_id == longest
