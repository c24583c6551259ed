import itertools, sys


def mw_p(a, b):
    def u(x, y):
        return sum((xi > yi) + 0.5 * (xi == yi) for xi in x for yi in y)

    obs = u(a, b)
    n = len(a)
    pool = a + b
    mean = n * len(b) / 2
    cnt = tot = 0
    for idx in itertools.combinations(range(len(pool)), n):
        s = set(idx)
        x = [pool[i] for i in idx]
        y = [pool[i] for i in range(len(pool)) if i not in s]
        tot += 1
        cnt += abs(u(x, y) - mean) >= abs(obs - mean) - 1e-9
    return cnt / tot


print("warm", mw_p([12.6, 12.4, 11.9, 12.3], [12.4, 12.5, 11.6, 11.7]))
print("cold", mw_p([32.4, 29.0, 26.7, 26.7], [30.2, 29.7, 27.1, 27.8]))
