"""`python -m loadtest.profiled ARGS...`: `kinference ARGS...` under cProfile, CPU time only.

The profile (process time, so the idle loop's waits are not counted) goes to
`$KINFERENCE_PROFILE_OUT.<pid>` when the process exits, including on SIGTERM's clean stop.
"""

from __future__ import annotations

import cProfile
import os
import runpy
import sys
import time


def main() -> None:
    out = f"{os.environ['KINFERENCE_PROFILE_OUT']}.{os.getpid()}"
    profile = cProfile.Profile(time.process_time)
    sys.argv = ["kinference", *sys.argv[1:]]
    profile.enable()
    try:
        runpy.run_module("kinference", run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        profile.disable()
        profile.dump_stats(out)


if __name__ == "__main__":
    main()
