"""A tiny calculator: the repository of the repository-task tests."""


def add(a, b):
    return a - b


def mul(a, b):
    return a * b
