import unittest
from money import *


class TestMoney(unittest.TestCase):
    def test_add_tax(self):
        self.assertEqual(add_tax(1000, 20), 1200)

    def test_split_bill(self):
        self.assertEqual(split_bill(1000, 3), (333, 1))

    def test_discount(self):
        self.assertEqual(discount(1000, 25), 750)
        self.assertEqual(discount(1000, 150), 0)

    def test_can_pay(self):
        self.assertEqual(can_pay(500, 500), True)
        self.assertEqual(can_pay(499, 500), False)

    def test_change(self):
        self.assertEqual(change(1000, 250), 750)
        self.assertEqual(change(100, 250), -1)

    def test_fmt(self):
        self.assertEqual(fmt(1205), "12.05")


if __name__ == "__main__":
    unittest.main()
