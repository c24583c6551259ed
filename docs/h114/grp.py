import pstats, sys, re, collections

N = float(sys.argv[2])
st = pstats.Stats(sys.argv[1]).stats
SKIP = re.compile(
    r"app\.py:256\(close|builtins\.compile|marshal|builtins\.exec|_imp\.|gc\.collect|__build_class__|importlib|<frozen"
)
g = collections.Counter()
for (fn, line, name), (cc, nc, tt, ct, callers) in st.items():
    key = f"{fn}:{line}({name})"
    if SKIP.search(key):
        continue
    if fn == "~":
        # builtins: attribute to caller's group by the biggest caller
        c = max(callers.items(), key=lambda kv: kv[1][2])[0] if callers else ("~", 0, "")
        fn2 = c[0]
    else:
        fn2 = fn
    m = re.search(r"kinference/([a-z_]+)(/[a-z_0-9]+)?", fn2)
    if m:
        grp = "kinference/" + m.group(1) + (m.group(2) or "")
    elif "uvicorn" in fn2:
        grp = "uvicorn"
    elif "prometheus" in fn2:
        grp = "prometheus"
    elif "asyncio" in fn2:
        grp = "asyncio"
    else:
        grp = fn2.split("/")[-1]
    g[grp] += tt
tot = sum(g.values())
print(f"total {tot / N * 1e6:.0f} us/req (profiled)")
for k, v in g.most_common(40):
    print(f"{v / N * 1e6:7.1f} {k}")
