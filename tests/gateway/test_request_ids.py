"""Request ids: the client's when usable, else fresh 128-bit hex ids."""

from __future__ import annotations

import random

import pytest

from kinference.gateway.request_ids import MAX_CLIENT_ID, RequestIds


def scope(*headers: tuple[bytes, bytes]) -> dict[str, object]:
    return {"headers": list(headers)}


def test_fresh_ids_are_32_hex_digits_and_distinct() -> None:
    ids = RequestIds()
    made = {ids.new() for _ in range(10_000)}
    assert len(made) == 10_000
    assert all(len(one) == 32 and int(one, 16) >= 0 for one in made)


def test_two_gateways_do_not_share_a_sequence() -> None:
    assert RequestIds().new() != RequestIds().new()


def test_the_clients_id_is_kept() -> None:
    ids = RequestIds(random.Random(1))
    assert ids.of(scope((b"accept", b"*/*"), (b"x-request-id", b"req-42"))) == "req-42"


@pytest.mark.parametrize(
    "value",
    [b"", b"x" * (MAX_CLIENT_ID + 1), "é".encode(), b"a\x00b", b"line\nbreak"],
)
def test_an_unusable_client_id_is_replaced(value: bytes) -> None:
    made = RequestIds().of(scope((b"x-request-id", value)))
    assert len(made) == 32 and made != value.decode("latin-1")
