"""Unit conversions (integer arithmetic where possible)."""


def c_to_f(c):
    return c * 9 // 5 + 32


def f_to_c(f):
    return (f - 32) * 5 // 9


def km_to_m(km):
    return km * 1000


def minutes(hours, mins):
    return hours * 60 + mins


def bmi_class(bmi):
    if bmi < 18:
        return "under"
    if bmi < 25:
        return "normal"
    return "over"


def cents(dollars, rest):
    return dollars * 100 + rest
