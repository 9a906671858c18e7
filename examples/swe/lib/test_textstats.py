import unittest
from textstats import *


class TestTextstats(unittest.TestCase):
    def test_word_count(self):
        self.assertEqual(word_count("a bb  ccc"), 3)

    def test_longest_word(self):
        self.assertEqual(longest_word("a bbb cc ddd"), "bbb")

    def test_line_count(self):
        self.assertEqual(line_count("a\nb\nc"), 3)
        self.assertEqual(line_count(""), 0)

    def test_avg_word_len(self):
        self.assertEqual(avg_word_len("ab abcd"), 3)
        self.assertEqual(avg_word_len(""), 0)

    def test_starts_with_count(self):
        self.assertEqual(starts_with_count("cat car dog", "ca"), 2)


if __name__ == "__main__":
    unittest.main()
