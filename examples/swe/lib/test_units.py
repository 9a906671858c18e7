import unittest
from units import *


class TestUnits(unittest.TestCase):
    def test_c_to_f(self):
        self.assertEqual(c_to_f(100), 212)
        self.assertEqual(c_to_f(0), 32)

    def test_f_to_c(self):
        self.assertEqual(f_to_c(212), 100)
        self.assertEqual(f_to_c(32), 0)

    def test_km_to_m(self):
        self.assertEqual(km_to_m(3), 3000)

    def test_minutes(self):
        self.assertEqual(minutes(2, 15), 135)

    def test_bmi_class(self):
        self.assertEqual(bmi_class(17), "under")
        self.assertEqual(bmi_class(18), "normal")
        self.assertEqual(bmi_class(24), "normal")
        self.assertEqual(bmi_class(25), "over")

    def test_cents(self):
        self.assertEqual(cents(3, 5), 305)


if __name__ == "__main__":
    unittest.main()
