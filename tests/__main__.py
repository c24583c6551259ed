"""`python -m tests`: every check CI runs, in order, failing fast.

Stale generated stubs, formatting, lint (with the complexity cap), `mypy --strict`, then the
test suite. Run from the repository root with the dev extra installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

STEPS: list[tuple[str, list[str]]] = [
    ("generated stubs are fresh", ["bash", "proto/generate.sh", "--check"]),
    ("ruff format", [PY, "-m", "ruff", "format", "--check", "kinference", "tests", "loadtest"]),
    ("ruff check", [PY, "-m", "ruff", "check", "kinference", "tests", "loadtest"]),
    ("mypy --strict", [PY, "-m", "mypy"]),
    ("import layers", [str(Path(PY).with_name("lint-imports"))]),
    # Two workers (pytest-xdist): a serial run waits about half its time (docs/benchmarks.md,
    # h175); `-n 0` after the command runs it serially.
    ("pytest", [PY, "-m", "pytest", "-q", "-n", "2", *sys.argv[1:]]),
]


def main() -> int:
    env = dict(os.environ, PYTHON=PY)
    # Bytecode kept: the suite starts dozens of interpreters (servers, parse workers,
    # benchmarks' smoke runs) that would each compile kinference again (~0.1-0.2 s), and
    # pytest's rewritten test modules are cached the same way (__pycache__ is ignored).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for title, command in STEPS:
        print(f"== {title}", flush=True)
        result = subprocess.run(command, cwd=ROOT, env=env, check=False)
        if result.returncode != 0:
            print(f"== FAILED: {title} (exit {result.returncode})", flush=True)
            return result.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
