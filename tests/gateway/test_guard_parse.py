"""A request the HTTP parser refuses (kinference.gateway.guard) is answered with the error
JSON every other error has, and a lingering close. Before: uvicorn's `text/plain` "Invalid
HTTP request received.", closed at once."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.conftest import PickerFactory
from tests.gateway.conftest import GatewayFactory
from tests.gateway.test_guard import LINE, answer, gateway

NOT_HTTP = {
    "two lengths": LINE + b"content-length: 2\r\ncontent-length: 3\r\n\r\nabc",
    "length and chunked": LINE
    + b"content-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    "length not a number": LINE + b"content-length: +2\r\n\r\n{}",
    "control byte in a header": LINE + b"x-request-id: a\x7fb\r\n\r\n",
}


@pytest.mark.parametrize("request_bytes", NOT_HTTP.values(), ids=NOT_HTTP.keys())
async def test_a_request_the_parser_refuses_is_400_json(
    request_bytes: bytes, start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    _picker, port = await gateway(start_picker, start_gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes)
    status, body = await answer(reader)
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_http_request"
    writer.close()
