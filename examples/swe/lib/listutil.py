"""List helpers."""


def chunk(xs, size):
    out = []
    for i in range(0, len(xs), size):
        out.append(xs[i:i + size])
    return out


def dedupe(xs):
    seen = set()
    out = []
    for x in xs:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def rotate(xs, k):
    if not xs:
        return xs
    k = k % len(xs)
    return xs[k:] + xs[:k]


def window_sums(xs, w):
    return [sum(xs[i:i + w]) for i in range(len(xs) - w + 1)]


def last_index(xs, x):
    for i in range(len(xs) - 1, -1, -1):
        if xs[i] == x:
            return i
    return -1


def take_while_positive(xs):
    out = []
    for x in xs:
        if x <= 0:
            break
        out.append(x)
    return out
