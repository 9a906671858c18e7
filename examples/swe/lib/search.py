"""Searching sorted lists."""


def binary_search(xs, x):
    lo, hi = 0, len(xs) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if xs[mid] == x:
            return mid
        if xs[mid] < x:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1


def count_less(xs, x):
    n = 0
    for v in xs:
        if v < x:
            n = n + 1
    return n


def first_greater(xs, x):
    for i, v in enumerate(xs):
        if v > x:
            return i
    return len(xs)


def contains(xs, x):
    return binary_search(xs, x) != -1


def span(xs):
    if not xs:
        return 0
    return xs[-1] - xs[0]
