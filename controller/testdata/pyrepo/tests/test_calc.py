# HIDDEN-TEST-MARKER: the agent must never read this file.
import unittest

import calc


class TestCalc(unittest.TestCase):
    def test_add(self):
        self.assertEqual(calc.add(2, 3), 5)

    def test_add_negative(self):
        self.assertEqual(calc.add(-2, -3), -5)

    def test_mul(self):
        self.assertEqual(calc.mul(2, 3), 6)


if __name__ == "__main__":
    unittest.main()
