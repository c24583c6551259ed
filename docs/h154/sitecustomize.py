# Historical (h154, 2026-12-07): ran on main `0eb9c46` (its branch `be297af`). The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h154` section, not maintained (run on `0eb9c46`).
# h154 probe: in a `kinference gateway` process with H154_HOLD=DIR, every hold's wait
# (seconds, and whether a token ended it) appended to DIR/hold.<pid>.txt in batches.
import os, sys

if os.environ.get("H154_HOLD") and "gateway" in " ".join(sys.argv):
    try:
        from kinference.kvevents import subscriber as _S
        from kinference.kvevents import hold as _H
    except ImportError:
        _S = None
    if _S is not None and hasattr(_S, "hold"):
        _fh = open(f"{os.environ['H154_HOLD']}/hold.{os.getpid()}.txt", "a")
        _buf = []
        _of = _S.hold

        async def hold(pool, slot, limit_s=None):
            w = await _of(pool, slot, limit_s)
            _buf.append(f"{w:.6f}\n")
            if len(_buf) >= 50:
                _fh.write("".join(_buf))
                _fh.flush()
                _buf.clear()
            return w

        _S.hold = hold
        import atexit

        atexit.register(lambda: (_fh.write("".join(_buf)), _fh.flush()))
