"""The C-speed member locator agrees with the scanner on every valid ASCII object."""

from __future__ import annotations

import json
import random

import pytest

from kinference.bodies import Body
from kinference.requests.fields import member_keys
from kinference.requests.members import ascii_members


def scanned(raw: bytes) -> tuple[object, int]:
    members, scanner = member_keys(Body([raw], reserved=len(raw)))
    return members, scanner.close_at


@pytest.mark.parametrize(
    "raw",
    [
        b"{}",
        b' { "a" : 1 , "b":[1,{"c":"}"}],"d":"x\\"y" } ',
        b'{"a":1,"a":2}',
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}\n',
    ],
)
def test_known_bodies(raw: bytes) -> None:
    assert ascii_members(raw) == scanned(raw)


def test_random_objects_agree_with_the_scanner() -> None:
    rng = random.Random(11)
    values = [1, 'q"x', [1, {"z": None}], {"k": [True, -2.5e10]}, "\u00e9", "a\\\\b", []]
    for _ in range(1500):
        obj = {f"k{j}": rng.choice(values) for j in range(rng.randrange(7))}
        raw = json.dumps(
            obj,
            indent=rng.choice([None, 0, 2]),
            separators=rng.choice([(",", ":"), (", ", ": ")]),
        ).encode()
        assert ascii_members(raw) == scanned(raw), raw


@pytest.mark.parametrize(
    "raw", [b'{"a":"\xc3\xa9"}', b"[1]", b'{"a" 1}', b'{"a":1 "b":2}', b"", b'{"a":1,}']
)
def test_non_ascii_or_odd_bodies_fall_back(raw: bytes) -> None:
    assert ascii_members(raw) is None
