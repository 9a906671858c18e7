import unittest
from listutil import *


class TestListutil(unittest.TestCase):
    def test_chunk(self):
        self.assertEqual(chunk([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]])

    def test_dedupe(self):
        self.assertEqual(dedupe([3, 1, 3, 2, 1]), [3, 1, 2])

    def test_rotate(self):
        self.assertEqual(rotate([1, 2, 3, 4], 1), [2, 3, 4, 1])
        self.assertEqual(rotate([1, 2, 3], 5), [3, 1, 2])
        self.assertEqual(rotate([], 2), [])

    def test_window_sums(self):
        self.assertEqual(window_sums([1, 2, 3, 4], 2), [3, 5, 7])
        self.assertEqual(window_sums([5, 1, 2], 3), [8])

    def test_last_index(self):
        self.assertEqual(last_index([1, 2, 1, 3], 1), 2)
        self.assertEqual(last_index([4, 5], 9), -1)
        self.assertEqual(last_index([7, 5], 7), 0)

    def test_take_while_positive(self):
        self.assertEqual(take_while_positive([3, 2, 0, 4]), [3, 2])
        self.assertEqual(take_while_positive([5, -1]), [5])


if __name__ == "__main__":
    unittest.main()
