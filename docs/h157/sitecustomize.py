import os, sys

if os.environ.get("H157_PROF") and "gateway" in sys.argv:
    import cProfile, signal, time

    _pr = None

    def _on(sig, frm):
        global _pr
        if os.environ.get("H157_CPU"):
            _pr = cProfile.Profile(time.thread_time_ns, 1e-9)
        else:
            _pr = cProfile.Profile()
        _pr.enable()

    def _off(sig, frm):
        _pr.disable()
        _pr.dump_stats(os.path.join(os.environ["H157_PROF"], f"gw-{os.getpid()}.prof"))

    signal.signal(signal.SIGUSR1, _on)
    signal.signal(signal.SIGUSR2, _off)
