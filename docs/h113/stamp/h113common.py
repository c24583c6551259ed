"""h113 scratch helpers shared by the probes: wrap named functions with thread-CPU timers,
make the caches cold between calls, load the recorded hasher calls."""

import functools, importlib, json, os, pickle, time

_JUNK = bytearray(3 << 20)
_DOC = {"k%d" % i: [i, str(i) * 3, {"x": i}] for i in range(150)}


def wrap_specs(specs, acc):
    """Wrap each "module:Owner.attr" so that its thread CPU (ns) adds to acc[attr]."""
    tt = time.thread_time_ns
    for spec in specs:
        mod, _, attr = spec.partition(":")
        owner = importlib.import_module(mod)
        parts = attr.split(".")
        for p in parts[:-1]:
            owner = getattr(owner, p)
        f, label = getattr(owner, parts[-1]), attr

        def w(*a, _f=f, _label=label, **k):
            t = tt()
            try:
                return _f(*a, **k)
            finally:
                acc[_label] = acc.get(_label, 0) + tt() - t

        setattr(owner, parts[-1], functools.wraps(f)(w))


def pollute(level):
    """level >= 1: ~0.3 ms of json/sort work; >= 2: and a 3 MiB sweep."""
    if level >= 1:
        json.loads(json.dumps(_DOC))
        sorted(map(str, range(400)))
    if level >= 2:
        for i in range(0, len(_JUNK), 64):
            _JUNK[i] = (_JUNK[i] + 1) & 255


def calls(path=os.environ.get("H113_CALLS", "/tmp/h113/calls.pkl")):
    with open(path, "rb") as fh:
        return pickle.load(fh)
