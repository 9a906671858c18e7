import unittest
from dates import *


class TestDates(unittest.TestCase):
    def test_is_leap(self):
        self.assertEqual(is_leap(2024), True)
        self.assertEqual(is_leap(1900), False)
        self.assertEqual(is_leap(2000), True)
        self.assertEqual(is_leap(2023), False)

    def test_days_in_month(self):
        self.assertEqual(days_in_month(2023, 2), 28)
        self.assertEqual(days_in_month(2024, 2), 29)
        self.assertEqual(days_in_month(2023, 4), 30)
        self.assertEqual(days_in_month(2023, 7), 31)

    def test_day_of_year(self):
        self.assertEqual(day_of_year(2023, 1, 5), 5)
        self.assertEqual(day_of_year(2023, 3, 1), 60)

    def test_hms(self):
        self.assertEqual(hms(3725), "1:02:05")
        self.assertEqual(hms(59), "0:00:59")

    def test_weeks_and_days(self):
        self.assertEqual(weeks_and_days(17), (2, 3))


if __name__ == "__main__":
    unittest.main()
