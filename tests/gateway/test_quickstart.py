"""The quick starts of README.md and docs/gateway.md name what the built-in policy serves.

(The commands themselves were run as written by hand: they need the fixed ports 8000, 8001,
9002 and 8080, which the suite never takes.)"""

from __future__ import annotations

import re
from pathlib import Path

from kinference.config import default_policy

ROOT = Path(__file__).resolve().parents[2]
_SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)


def first_blocks(doc: str, count: int) -> str:
    return "\n".join(_SH_BLOCK.findall((ROOT / doc).read_text(encoding="utf-8"))[:count])


def test_readme_first_request_asks_for_a_model_the_built_in_policy_serves() -> None:
    block = first_blocks("README.md", 3)
    models = re.findall(r'"model": "([^"]+)"', block)
    assert models and set(models) <= set(default_policy().model_names)
    assert "--port 8000 --count 2" in block  # where the built-in pool's endpoints are
    pools = default_policy().pools
    assert [pool.endpoints for pool in pools] == [("127.0.0.1:8000", "127.0.0.1:8001")]


def test_gateway_quick_start_sends_the_key_its_keys_file_defines() -> None:
    block = first_blocks("docs/gateway.md", 1)
    defined = set(re.findall(r"\\n  (sk-[\w-]+): ", block))
    sent = set(re.findall(r"(?:Bearer |x-api-key: )(sk-[\w-]+)", block))
    assert defined and sent == defined
    models = re.findall(r'"model": "([^"]+)"', block)
    assert models and set(models) <= set(default_policy().model_names)
