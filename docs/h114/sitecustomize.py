import os, sys

if os.environ.get("H114_PROF") and "gateway" in sys.argv:
    import atexit, cProfile

    _pr = cProfile.Profile()
    _pr.enable()

    def _dump():
        _pr.disable()
        _pr.dump_stats(os.path.join(os.environ["H114_PROF"], f"gw-{os.getpid()}.prof"))

    atexit.register(_dump)
