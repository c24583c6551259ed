import pstats, sys, re, collections

N = float(sys.argv[2])
st = pstats.Stats(sys.argv[1]).stats
g = collections.Counter()
for (fn, line, name), (cc, nc, tt, ct, callers) in st.items():
    m = re.search(r"kinference/([a-z_]+)(/[a-z_0-9]+)?", fn)
    grp = (
        ("kinference/" + m.group(1) + (m.group(2) or ""))
        if m
        else (
            "uvicorn"
            if "uvicorn" in fn
            else "prometheus"
            if "prometheus" in fn
            else "asyncio"
            if "asyncio" in fn
            else "builtin"
            if fn == "~"
            else fn.split("/")[-1]
        )
    )
    g[grp] += nc
print("calls/req total", sum(g.values()) / N)
for k, v in g.most_common(25):
    print(f"{v / N:8.1f} {k}")
