"""Coverage-guided fuzzing of the request parser and the policy loader with atheris.

Not part of the test suite (it runs until stopped or for -runs/-max_total_time):

    .venv/bin/pip install -e '.[fuzz]'
    .venv/bin/python -m tests.hostile.fuzz_parser request -max_total_time=120
    .venv/bin/python -m tests.hostile.fuzz_parser policy -max_total_time=120

Arguments after the target go to libFuzzer (e.g. a corpus directory, -runs=N); an empty
corpus directory is first seeded with valid requests (or policies). A crash is
any exception other than the one each entry point is documented to raise: MalformedRequest
from the request parser (whole and scanned in chunks of a size the input chooses, and every
parsed request rewritten), PolicyError from the policy loader.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

import atheris  # type: ignore[import-not-found]

with atheris.instrument_imports():
    from kinference.config import PolicyError, decode_policy
    from kinference.config.default import DEFAULT_POLICY_YAML
    from kinference.requests import MalformedRequest, parse_request, rewrite
    from tests.config.test_docs import full_example
    from tests.requests import scanned_body, whole_body
    from tests.requests.samples import SAMPLES
    from tests.requests.test_rewrite import random_plan


def fuzz_request(data: bytes) -> None:
    if not data:
        return
    chunk, body = data[0] + 1, data[1:]
    for built in (whole_body(body), scanned_body(body, chunk)):
        try:
            request = parse_request(built)
        except MalformedRequest:
            continue
        rewrite(built, request, random_plan(random.Random(chunk)))


def fuzz_policy(data: bytes) -> None:
    with contextlib.suppress(PolicyError):
        decode_policy(data, source="<fuzz>")


TARGETS: dict[str, Callable[[bytes], None]] = {"request": fuzz_request, "policy": fuzz_policy}


def seed(directory: Path, target: str) -> None:
    """Fill an empty corpus directory with valid inputs to start from (libFuzzer alone
    rarely composes a JSON request or a policy that gets past the first checks)."""
    if not directory.is_dir() or any(directory.iterdir()):
        return
    if target == "request":
        documents = [json.dumps(doc).encode() for doc, *_ in SAMPLES.values()]
        seeds = [bytes([63]) + doc for doc in documents]  # first byte: chunk size - 1
    else:
        seeds = [full_example().encode(), DEFAULT_POLICY_YAML.encode()]
    for index, data in enumerate(seeds):
        (directory / f"seed-{index}").write_bytes(data)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(
            f"usage: python -m tests.hostile.fuzz_parser {{{'|'.join(TARGETS)}}} [libFuzzer args]"
        )
    target = TARGETS[sys.argv[1]]
    for arg in sys.argv[2:]:
        if not arg.startswith("-"):
            seed(Path(arg), sys.argv[1])
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
