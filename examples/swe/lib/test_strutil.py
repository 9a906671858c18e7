import unittest
from strutil import *


class TestStrutil(unittest.TestCase):
    def test_capitalize_words(self):
        self.assertEqual(capitalize_words("hello big world"), "Hello Big World")

    def test_count_vowels(self):
        self.assertEqual(count_vowels("Banana"), 3)
        self.assertEqual(count_vowels("xyz"), 0)

    def test_is_palindrome(self):
        self.assertEqual(is_palindrome("Never odd or even"), True)
        self.assertEqual(is_palindrome("abc"), False)

    def test_truncate(self):
        self.assertEqual(truncate("hello world", 8), "hello...")
        self.assertEqual(truncate("hi", 8), "hi")
        self.assertEqual(truncate("abcdefgh", 8), "abcdefgh")

    def test_pad_left(self):
        self.assertEqual(pad_left("7", 3, "0"), "007")
        self.assertEqual(pad_left("1234", 3, "0"), "1234")

    def test_repeat_join(self):
        self.assertEqual(repeat_join("ab", 3, "-"), "ab-ab-ab")


if __name__ == "__main__":
    unittest.main()
