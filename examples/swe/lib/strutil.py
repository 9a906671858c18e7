"""String helpers."""


def capitalize_words(s):
    return " ".join(w[:1].upper() + w[1:] for w in s.split(" "))


def count_vowels(s):
    n = 0
    for c in s.lower():
        if c in "aeiou":
            n = n + 1
    return n


def is_palindrome(s):
    t = s.lower().replace(" ", "")
    return t == t[::-1]


def truncate(s, width):
    if len(s) <= width:
        return s
    return s[:width - 3] + "..."


def pad_left(s, width, fill):
    if len(s) >= width:
        return s
    return fill * (width - len(s)) + s


def repeat_join(s, n, sep):
    return sep.join([s] * n)
