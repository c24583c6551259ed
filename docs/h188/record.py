"""h188 scratch: `loadtest.bench_precise_mocker` with every call into `PoolCaches` that
changes or reads the queue replay's state recorded (pickled at call time), to replay the
same 60-s mocker history offline through base and branch (`replay.py`).

    python docs/h188/record.py OUT.pkl [bench args]
"""

import functools
import pickle
import sys

from kinference.kvcache import pool as P
from loadtest import bench_precise_mocker as B

CALLS = (
    "apply",
    "sent",
    "started",
    "finished",
    "surviving",
    "extend",
    "room",
    "expect",
    "claim",
    "complete",
    "forget",
)


def main() -> int:
    out, argv = sys.argv[1], sys.argv[2:]
    log: list[bytes] = []
    ids: dict[int, int] = {}

    def wrap(name, fn):
        @functools.wraps(fn)
        def recorded(self, *args):
            pool = ids.setdefault(id(self), len(ids))
            if name == "apply":
                args = (args[0], list(args[1]))
            at = len(log)
            log.append(pickle.dumps(args))
            result = fn(self, *args)
            log[at] = pickle.dumps((pool, self.block_size, name, log[at], result, self.clock()))
            return result

        return recorded

    for name in CALLS:
        setattr(P.PoolCaches, name, wrap(name, getattr(P.PoolCaches, name)))
    try:
        return B.main(argv)
    finally:
        with open(out, "wb") as f:
            pickle.dump(log, f)


if __name__ == "__main__":
    sys.exit(main())
