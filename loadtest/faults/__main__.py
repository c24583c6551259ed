"""Fault suite: kinference under load and faults, with nothing lost.

    python -m loadtest.faults [--quick] [--scenario NAME ...]

Scenarios (real `kinference serve` subprocesses on loopback; see each module):
  redis        Redis killed, paused and restarted under a steady load (2 replicas)
  replica      a replica SIGKILLed mid-request (3 replicas sharing Redis)
  resets       callers resetting at every stage of the flow
  abandon      10,000 requests abandoned at random stages (1,000 with --quick)
  slow-pull    a 64 MiB body pulled at a crawl (16 MiB with --quick) beside normal traffic
  stalled-push hundreds of PushBody streams that send one chunk and go quiet
  budget       one tenant budget, 30 concurrent callers on 3 replicas, Redis restarted
               empty, and 3 replicas without Redis
  tenant-flood thousands of caller-chosen tenants, then a Redis that refuses writes

Prints one row per scenario: requests, failed requests (target 0), the spec's own errors,
what is held after the TTLs (bytes / bodies / requests in flight, target 0/0/0), RSS
baseline and after (MiB), and whether the replicas' state equals a fresh replica's.
Exit status 1 when any target is missed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvloop

from loadtest.faults import (
    abandon,
    budget,
    redis_faults,
    replica_kill,
    resets,
    slow_pull,
    stalled_push,
    tenant_flood,
)
from loadtest.faults.load import Tally
from loadtest.faults.report import Row, format_table

Scenario = Callable[[bool, Path], Awaitable[Row]]
SCENARIOS: dict[str, Scenario] = {
    "redis": redis_faults.run,
    "replica": replica_kill.run,
    "resets": resets.run,
    "abandon": abandon.run,
    "slow-pull": slow_pull.run,
    "stalled-push": stalled_push.run,
    "budget": budget.run,
    "tenant-flood": tenant_flood.run,
}


async def run_scenario(name: str, quick: bool) -> Row:
    """Run one scenario in its own work directory; a crash becomes a row with the problem."""
    start = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix=f"kinference-faults-{name}-"))
    try:
        row = await SCENARIOS[name](quick, workdir)
    except Exception as exc:
        traceback.print_exc()
        row = Row(name, Tally(), problems=[f"{type(exc).__name__}: {exc}"])
    row.seconds = time.monotonic() - start
    return row


async def run_all(names: list[str], quick: bool) -> list[Row]:
    rows = []
    for name in names:
        rows.append(await run_scenario(name, quick))
        print(format_table(rows[-1:]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the sizes the tests use")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), default=[])
    args = parser.parse_args(argv)
    rows = uvloop.run(run_all(args.scenario or list(SCENARIOS), args.quick))
    print("\n" + format_table(rows))
    return 0 if all(row.ok for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
