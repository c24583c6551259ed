"""Mutants of the one backlog/snapshot rule (`Shards.flush`, `Publisher._send`): each must
make a test of tests/cluster fail. Run from the worktree: .venv/bin/python docs/h193/mutants.py"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = [
    "tests/cluster/test_publisher.py",
    "tests/cluster/test_backlog.py",
    "tests/cluster/test_bootstrap.py",
    "tests/cluster/test_members.py",
    "tests/cluster/test_shards.py",
    "tests/cluster/test_replication.py",
    "tests/cluster/test_refusing_redis.py",
    "tests/cluster/test_refusal_catch_up.py",
    "tests/cluster/test_forgetful_redis.py",
    "tests/cluster/test_lost_replies.py",
]
SHARDS, PUBLISHER = Path("kinference/cluster/shards.py"), Path("kinference/cluster/replication.py")
MUTANTS = {
    "backlog: no snapshot before the send": (SHARDS, "if dropped or backlog:", "if dropped:"),
    "backlog: no snapshot owed after the send": (
        SHARDS,
        "                raise result\n        if backlog:",
        "                raise result\n        if False:",
    ),
    "dropped events: no snapshot": (SHARDS, "if dropped or backlog:", "if backlog:"),
    "load read after the sends begin": (
        SHARDS,
        "s.publisher.deliver(*parts.get(s.pool, ([], set())), self._own(s.pool))",
        "_late(s.publisher, *parts.get(s.pool, ([], set())), lambda p=s.pool: self._own(p))",
    ),
    "lost hash: no snapshot after": (
        PUBLISHER,
        "if not snapshot and replies[0] == 1:",
        "if False:",
    ),
}
LATE = """

async def _late(publisher: Any, events: Any, dirty: Any, own: Any) -> None:
    await asyncio.sleep(0)
    await publisher.deliver(events, dirty, own())
"""


def main() -> int:
    survived = 0
    for name, (path, old, new) in MUTANTS.items():
        source = path.read_text()
        assert source.count(old) == 1, name
        mutated = source.replace(old, new) + (LATE if "_late(" in new else "")
        path.write_text(mutated)
        try:
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", *TESTS],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
        finally:
            path.write_text(source)
        failed = [line for line in run.stdout.splitlines() if line.startswith("FAILED")]
        verdict = "killed" if run.returncode else "SURVIVED"
        survived += run.returncode == 0
        print(f"{verdict:9} {name}: {failed[:1] or run.stdout.splitlines()[-1:]}", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
