"""The gateway's own answers (health, models, metrics, 404/405), on an ASGI double."""

from __future__ import annotations

import json

from kinference.gateway.own_routes import answer_get, answer_unrouted, is_get_route
from tests.gateway.fakes_asgi import Client, FakePicker, fake_gateway, scope


async def test_health_follows_the_picker() -> None:
    for serving, status in ((True, 200), (False, 503)):
        gateway, registry = fake_gateway(picker=FakePicker(serving=serving))
        client = Client()
        await answer_get(gateway, registry, "/healthz", scope("GET", "/healthz"), client.send)
        assert client.status == status
        assert json.loads(client.body)["status"] == ("ok" if serving else "picker not serving")


async def test_models_from_the_setting_before_the_policy() -> None:
    picker = FakePicker(names=("a", "b"))
    for models, listed in (("", ["a", "b"]), ("x, y", ["x", "y"])):
        gateway, registry = fake_gateway(picker=picker, models=models)
        client = Client()
        await answer_get(gateway, registry, "/v1/models", scope("GET", "/v1/models"), client.send)
        assert [entry["id"] for entry in json.loads(client.body)["data"]] == listed


async def test_one_model_or_its_404_with_the_clients_request_id() -> None:
    gateway, registry = fake_gateway(picker=FakePicker(names=("a",)))
    found = Client()
    await answer_get(gateway, registry, "/v1/models/a", scope("GET", "/v1/models/a"), found.send)
    assert json.loads(found.body)["id"] == "a"
    missing = Client()
    asked = scope("GET", "/v1/models/" + "z" * 5000, [(b"x-request-id", b"mine-1")])
    await answer_get(gateway, registry, asked["path"], asked, missing.send)
    assert missing.status == 404 and missing.headers[b"x-request-id"] == b"mine-1"
    error = json.loads(missing.body)["error"]
    assert error["code"] == "model_not_found" and len(error["message"]) < 300


async def test_metrics_are_the_registrys_exposition() -> None:
    gateway, registry = fake_gateway()
    gateway.metrics.answered("other", "none", 404, 0.0)
    client = Client()
    await answer_get(gateway, registry, "/metrics", scope("GET", "/metrics"), client.send)
    assert client.status == 200
    assert b'kinference_gateway_requests_total{model="none",route="other",status="404"}' in (
        client.body
    )
    assert int(client.headers[b"content-length"]) == len(client.body)


async def test_wrong_method_is_405_with_allow_and_unknown_path_404() -> None:
    gateway, _ = fake_gateway()
    cases = [
        ("GET", "/v1/chat/completions", True, 405, b"POST"),
        ("POST", "/metrics", False, 405, b"GET"),
        ("DELETE", "/nope/" + "x" * 1000, False, 404, None),
    ]
    for method, path, inference, status, allow in cases:
        client = Client()
        await answer_unrouted(
            gateway, method, path, scope(method, path), client.send, inference=inference
        )
        assert client.status == status
        assert client.headers.get(b"allow") == allow
        assert len(json.loads(client.body)["error"]["message"]) < 300
    assert gateway.metrics.requests.labels("other", "none", "404")._value.get() == 1


def test_get_routes() -> None:
    assert is_get_route("/health") and is_get_route("/v1/models/any/thing")
    assert not is_get_route("/v1/chat/completions") and not is_get_route("/v1/model")
