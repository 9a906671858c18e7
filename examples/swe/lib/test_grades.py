import unittest
from grades import *


class TestGrades(unittest.TestCase):
    def test_letter(self):
        self.assertEqual(letter(95), "A")
        self.assertEqual(letter(90), "A")
        self.assertEqual(letter(85), "B")
        self.assertEqual(letter(70), "C")
        self.assertEqual(letter(40), "F")

    def test_average(self):
        self.assertEqual(average([80, 90, 100]), 90)
        self.assertEqual(average([]), 0)

    def test_passed(self):
        self.assertEqual(passed(60, 60), True)
        self.assertEqual(passed(59, 60), False)

    def test_curve(self):
        self.assertEqual(curve([70, 98], 5), [75, 100])

    def test_best(self):
        self.assertEqual(best([3, 9, 4]), 9)
        self.assertEqual(best([5]), 5)

    def test_count_failing(self):
        self.assertEqual(count_failing([50, 60, 70], 60), 1)


if __name__ == "__main__":
    unittest.main()
