import unittest
from matrix import *


class TestMatrix(unittest.TestCase):
    def test_transpose(self):
        self.assertEqual(transpose([[1, 2], [3, 4]]), [[1, 3], [2, 4]])

    def test_mat_add(self):
        self.assertEqual(mat_add([[1, 2]], [[3, 4]]), [[4, 6]])

    def test_identity(self):
        self.assertEqual(identity(2), [[1, 0], [0, 1]])

    def test_trace(self):
        self.assertEqual(trace([[1, 2], [3, 4]]), 5)

    def test_dot(self):
        self.assertEqual(dot([1, 2, 3], [4, 5, 6]), 32)

    def test_row_sums(self):
        self.assertEqual(row_sums([[1, 2], [3, 4]]), [3, 7])


if __name__ == "__main__":
    unittest.main()
