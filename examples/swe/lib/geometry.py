"""Plane geometry on integer points."""


def rect_area(w, h):
    return w * h


def rect_perimeter(w, h):
    return 2 * (w + h)


def manhattan(x1, y1, x2, y2):
    return abs(x1 - x2) + abs(y1 - y2)


def triangle_kind(a, b, c):
    if a == b and b == c:
        return "equilateral"
    if a == b or b == c or a == c:
        return "isosceles"
    return "scalene"


def in_box(x, y, w, h):
    return 0 <= x and x < w and 0 <= y and y < h


def quadrant(x, y):
    if x > 0 and y > 0:
        return 1
    if x < 0 and y > 0:
        return 2
    if x < 0 and y < 0:
        return 3
    return 4
