import unittest
from geometry import *


class TestGeometry(unittest.TestCase):
    def test_rect_area(self):
        self.assertEqual(rect_area(3, 4), 12)

    def test_rect_perimeter(self):
        self.assertEqual(rect_perimeter(3, 4), 14)

    def test_manhattan(self):
        self.assertEqual(manhattan(1, 2, 4, 6), 7)
        self.assertEqual(manhattan(5, 0, 2, 0), 3)

    def test_triangle_kind(self):
        self.assertEqual(triangle_kind(2, 2, 2), "equilateral")
        self.assertEqual(triangle_kind(2, 3, 2), "isosceles")
        self.assertEqual(triangle_kind(2, 3, 3), "isosceles")
        self.assertEqual(triangle_kind(2, 3, 4), "scalene")

    def test_in_box(self):
        self.assertEqual(in_box(0, 0, 5, 5), True)
        self.assertEqual(in_box(5, 1, 5, 5), False)
        self.assertEqual(in_box(1, -1, 5, 5), False)
        self.assertEqual(in_box(4, 5, 5, 5), False)

    def test_quadrant(self):
        self.assertEqual(quadrant(1, 1), 1)
        self.assertEqual(quadrant(-1, 1), 2)
        self.assertEqual(quadrant(-1, -1), 3)
        self.assertEqual(quadrant(1, -1), 4)


if __name__ == "__main__":
    unittest.main()
