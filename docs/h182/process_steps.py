"""The parse worker's start, replace and close cancelled at every loop step, on asyncio and
uvloop: no child left running or unreaped, no descriptor left open, no file object left
to close a reused descriptor number later (checked by reopening files after a collection).

    python -m docs.h182.process_steps
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from docs.h182.common import children, descriptors
from kinference.requests.process import WorkerLost, WorkerProcess

IDLE = (sys.executable, "-c", "import sys; sys.stdin.buffer.read()")  # exits at EOF
LINGERS = (sys.executable, "-c", "import time; time.sleep(60)")  # ignores EOF
MAX_STEPS = 12
SETTLE_STEPS = int(os.environ.get("H182_SETTLE_STEPS", "3"))


async def case(op: str, command: tuple[str, ...], steps: int) -> str | None:
    """`op` on a worker, cancelled `steps` loop steps in; what went wrong, or None."""
    worker = WorkerProcess(command)
    if op in ("replace", "aclose", "send"):
        await worker.start()
    fds, kids = descriptors(), children() - ({worker.pid} if worker.pid else set())
    ops: dict[str, Callable[[], Awaitable[Any]]] = {
        "start": worker.start, "replace": worker.replace, "aclose": worker.aclose,
        "send": lambda: worker.send("ping", None),
    }  # fmt: skip
    task = asyncio.ensure_future(ops[op]())
    for _ in range(steps):
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, WorkerLost):
        await task
    await worker.aclose()
    end = time.monotonic() + 10
    while children() - kids and time.monotonic() < end:
        await asyncio.sleep(0.01)
    if children() - kids:
        return f"children left: {children() - kids}"
    for _ in range(SETTLE_STEPS):  # a transport's close takes effect a loop step later
        await asyncio.sleep(0)
    gc.collect()
    files = [tempfile.TemporaryFile() for _ in range(4)]  # noqa: SIM115
    try:
        gc.collect()
        for file in files:
            os.fstat(file.fileno())
    except OSError as exc:
        return f"a reused descriptor was closed by a stale file: {exc}"
    finally:
        for file in files:
            with contextlib.suppress(OSError):
                file.close()
    new = {fd: what for fd, what in descriptors().items() if fds.get(fd) != what}
    return f"descriptors left: {new}" if new else None


async def all_cases() -> list[str]:
    warm = WorkerProcess(IDLE)  # uvloop opens /dev/null once per loop at a first pipe
    await warm.start()
    await warm.aclose()
    wrong = []
    for op in ("start", "replace", "aclose", "send"):
        for command in (IDLE, LINGERS):
            for steps in range(MAX_STEPS):
                problem = await case(op, command, steps)
                if problem:
                    wrong.append(f"{op} {command[-1][:20]!r} at step {steps}: {problem}")
    return wrong


def main() -> None:
    import uvloop

    for label, run in (("asyncio", asyncio.run), ("uvloop", uvloop.run)):
        wrong = run(all_cases())
        print(f"{label}: {4 * 2 * MAX_STEPS} cases, {len(wrong)} wrong")
        for line in wrong:
            print("  ", line)


if __name__ == "__main__":
    main()
