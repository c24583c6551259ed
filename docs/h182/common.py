"""What h182's crowd scripts share: the command line's loop, this process's children and
open descriptors."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def runner() -> Callable[[Any], Any]:
    """`asyncio.run`, or `uvloop.run` with `--uvloop` on the command line."""
    if "--uvloop" in sys.argv:
        import uvloop

        return uvloop.run
    return asyncio.run


def children() -> set[int]:
    """This process's live or unreaped children (Linux)."""
    found: set[int] = set()
    for listed in Path("/proc/self/task").glob("*/children"):
        found.update(int(pid) for pid in listed.read_text().split())
    return found


def descriptors() -> dict[str, str]:
    """This process's open descriptors -> what each is."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return found
