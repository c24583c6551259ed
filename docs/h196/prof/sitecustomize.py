"""h196 scratch probe: cProfile the `kinference gateway` process of a routing-bench run.

With H196_PROF=DIR and PYTHONPATH=docs/h196/prof:<tree>, a process whose argv has
"gateway" profiles its whole life (threads other than the main one are not seen) and
writes DIR/gw.PID.prof at exit; every other process is left alone."""

import os
import sys

_D = os.environ.get("H196_PROF")
if _D and "gateway" in sys.argv and "--listen" in sys.argv:
    import atexit
    import cProfile

    _prof = cProfile.Profile()
    _prof.enable()

    def _dump() -> None:
        _prof.disable()
        _prof.dump_stats(os.path.join(_D, f"gw.{os.getpid()}.prof"))

    atexit.register(_dump)
