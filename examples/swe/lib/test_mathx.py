import unittest
from mathx import *


class TestMathx(unittest.TestCase):
    def test_clamp(self):
        self.assertEqual(clamp(5, 0, 10), 5)
        self.assertEqual(clamp(-3, 0, 10), 0)
        self.assertEqual(clamp(12, 0, 10), 10)

    def test_gcd(self):
        self.assertEqual(gcd(12, 8), 4)
        self.assertEqual(gcd(7, 3), 1)

    def test_lcm(self):
        self.assertEqual(lcm(4, 6), 12)
        self.assertEqual(lcm(3, 5), 15)

    def test_is_prime(self):
        self.assertEqual(is_prime(7), True)
        self.assertEqual(is_prime(9), False)
        self.assertEqual(is_prime(2), True)
        self.assertEqual(is_prime(1), False)

    def test_factorial(self):
        self.assertEqual(factorial(5), 120)
        self.assertEqual(factorial(1), 1)

    def test_digit_sum(self):
        self.assertEqual(digit_sum(123), 6)
        self.assertEqual(digit_sum(905), 14)


if __name__ == "__main__":
    unittest.main()
