import unittest
from search import *


class TestSearch(unittest.TestCase):
    def test_binary_search(self):
        self.assertEqual(binary_search([1, 3, 5, 7, 9], 7), 3)
        self.assertEqual(binary_search([1, 3, 5, 7, 9], 1), 0)
        self.assertEqual(binary_search([1, 3, 5, 7, 9], 9), 4)
        self.assertEqual(binary_search([1, 3, 5], 4), -1)

    def test_count_less(self):
        self.assertEqual(count_less([1, 2, 3, 4], 3), 2)

    def test_first_greater(self):
        self.assertEqual(first_greater([1, 3, 5], 3), 2)
        self.assertEqual(first_greater([1, 3, 5], 9), 3)

    def test_contains(self):
        self.assertEqual(contains([2, 4, 6], 4), True)
        self.assertEqual(contains([2, 4, 6], 5), False)

    def test_span(self):
        self.assertEqual(span([2, 5, 9]), 7)
        self.assertEqual(span([]), 0)


if __name__ == "__main__":
    unittest.main()
