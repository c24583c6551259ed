import re, sys, statistics as st
from collections import defaultdict
from itertools import combinations

d = defaultdict(list)
for l in open(f"/tmp/lead/ab/{sys.argv[1]}/runs.txt"):
    m = re.match(r"(\w+) 8 .*median per round lowest ([\d.]+)", l)
    if m:
        d[m[1]].append(float(m[2]))


def u(a, b):
    return sum((x > y) + 0.5 * (x == y) for x in a for y in b)


def p(a, b):
    pool = a + b
    mean = len(a) * len(b) / 2
    obs = abs(u(a, b) - mean)
    t = e = 0
    for idx in combinations(range(len(pool)), len(a)):
        s = set(idx)
        xs = [pool[i] for i in idx]
        ys = [pool[i] for i in range(len(pool)) if i not in s]
        t += 1
        e += abs(u(xs, ys) - mean) >= obs - 1e-9
    return e / t


for k, v in d.items():
    print(k, st.median(v), sorted(v), "p vs base %.4f" % p(d["base"], v) if k != "base" else "")
