"""Small matrices as lists of rows."""


def transpose(m):
    return [list(r) for r in zip(*m)]


def mat_add(a, b):
    return [[a[i][j] + b[i][j] for j in range(len(a[0]))] for i in range(len(a))]


def identity(n):
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def trace(m):
    total = 0
    for i in range(len(m)):
        total = total + m[i][i]
    return total


def dot(u, v):
    return sum(u[i] * v[i] for i in range(len(u)))


def row_sums(m):
    return [sum(r) for r in m]
