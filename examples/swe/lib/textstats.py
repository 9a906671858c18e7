"""Word statistics."""


def word_count(s):
    return len(s.split())


def longest_word(s):
    best = ""
    for w in s.split():
        if len(w) > len(best):
            best = w
    return best


def line_count(s):
    if s == "":
        return 0
    return s.count("\n") + 1


def avg_word_len(s):
    words = s.split()
    if not words:
        return 0
    return sum(len(w) for w in words) // len(words)


def starts_with_count(s, prefix):
    return len([w for w in s.split() if w.startswith(prefix)])
