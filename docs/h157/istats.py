import sys, glob, re, statistics

sys.path.insert(0, "/tmp/h157")
from stats import mw_p

d = sys.argv[1]
group = 3 if "--best" in sys.argv else 4  # best of the reps, or their median
rows = {}
for f in sorted(glob.glob(f"{d}/inproc-*.txt")):
    arm = f.rsplit("-", 1)[1][:-4]
    for line in open(f):
        m = re.match(r"(\w+) @(\d+): best ([\d.]+) median ([\d.]+)", line)
        if m:
            rows.setdefault((m.group(1), int(m.group(2))), {}).setdefault(arm, []).append(
                float(m.group(group))
            )
for key, arms in rows.items():
    a, b = arms.get("base", []), arms.get("br", [])
    print(
        f"| {key[0]} @{key[1]} | {statistics.median(a):.1f} [{min(a):.1f}–{max(a):.1f}] | {statistics.median(b):.1f} [{min(b):.1f}–{max(b):.1f}] | {len(a)}/{len(b)} | {mw_p(a, b):.4f} | {statistics.median(b) - statistics.median(a):+.1f} |"
    )
