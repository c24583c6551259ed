"""h206 scratch probe: cProfile the `kinference gateway` process of a benchmark run.

With H206_PROF=DIR and PYTHONPATH=docs/h206/prof:<tree>, a process whose argv has
"gateway" and "--listen" profiles its main thread from start to exit and writes
DIR/gw.PID.prof (the benchmark stops it with SIGTERM: the CLI's own shutdown runs, then
atexit); every other process is left alone."""

import os
import sys

_D = os.environ.get("H206_PROF")
if _D and "gateway" in sys.argv and "--listen" in sys.argv:
    import atexit
    import cProfile
    import time

    _prof = cProfile.Profile(time.thread_time) if os.environ.get("H206_CPU") else cProfile.Profile()
    _prof.enable()

    def _dump() -> None:
        _prof.disable()
        _prof.dump_stats(os.path.join(_D, f"gw.{os.getpid()}.prof"))

    atexit.register(_dump)
