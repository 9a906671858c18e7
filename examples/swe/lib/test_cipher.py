import unittest
from cipher import *


class TestCipher(unittest.TestCase):
    def test_shift_char(self):
        self.assertEqual(shift_char("a", 1), "b")
        self.assertEqual(shift_char("z", 2), "b")
        self.assertEqual(shift_char(" ", 3), " ")

    def test_caesar(self):
        self.assertEqual(caesar("abc xyz", 3), "def abc")

    def test_uncaesar(self):
        self.assertEqual(uncaesar("def", 3), "abc")

    def test_checksum(self):
        self.assertEqual(checksum("ab"), 42)
        self.assertEqual(checksum("abc"), 88)

    def test_swap_pairs(self):
        self.assertEqual(swap_pairs("abcd"), "badc")
        self.assertEqual(swap_pairs("abcde"), "badce")


if __name__ == "__main__":
    unittest.main()
