"""docs/security.md shows exactly the ACLs the Redis tests run under."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile.redis_tls import PICKER, PICKER_ACL, READER, READER_ACL

DOC = Path(__file__).parents[2] / "docs" / "security.md"


@pytest.mark.parametrize(("user", "acl"), [(PICKER[0], PICKER_ACL), (READER[0], READER_ACL)])
def test_documented_acl_is_the_tested_one(user: str, acl: str) -> None:
    lines = [line for line in DOC.read_text().splitlines() if line.startswith(f"user {user} ")]
    assert len(lines) == 1, f"docs/security.md shows the {user} ACL once"
    documented = lines[0].replace(">PASSWORD", "#HASH")
    assert documented == f"user {user} " + acl.format(password="HASH")
