# h136 scratch: in a `kinference gateway` process (H136_TRACE=DIR), one JSON line per Pick
# with each candidate's TTFT terms, footprint, score and the choice. Not product code.
import os, sys

if os.environ.get("H136_TRACE") and "gateway" in " ".join(sys.argv):
    import json, time
    from kinference.routing.scorers import ttft as T
    from kinference.routing.scorers.ttft_small import small_terms
    from kinference.routing.plugins import pick as P

    fh = open(f"{os.environ['H136_TRACE']}/tr.{os.getpid()}.jsonl", "a", buffering=1)
    last = {}
    orig = T.TtftScorer._score_small

    def _score_small(self, ctx):
        s = orig(self, ctx)
        pr, wa, own, sw, un, ar = small_terms(self.config, self.rates, self._ms_per_token, ctx)
        eps = [ctx.table.endpoints[i] for i in ctx.slots.tolist()]
        last.clear()
        last.update(
            t=time.perf_counter(),
            tokens=float(ctx.prompt_tokens),
            eps=eps,
            cached=ctx.cached_tokens.tolist(),
            fp=ctx.footprint,
            seq=(ctx.sequences.tolist() if ctx.sequences is not None else None),
            pred=pr,
            wait=wa,
            own=own,
            slot=sw,
            unsure=un,
            rate=ar,
            score=s.tolist(),
            pending=[float(ctx.table.pending_prefill[i]) for i in ctx.slots.tolist()],
        )
        return s

    T.TtftScorer._score_small = _score_small
    opick = P.MaxScorePicker.pick

    def pick(self, totals, rng, home=None, endpoints=None):
        i = opick(self, totals, rng, home, endpoints)
        if last:
            last["chosen"] = i
            last["home"] = home is not None
            fh.write(json.dumps(last) + "\n")
            last.clear()
        return i

    P.MaxScorePicker.pick = pick
