"""Toy ciphers over lowercase letters."""


def shift_char(c, k):
    if not c.isalpha():
        return c
    return chr((ord(c) - 97 + k) % 26 + 97)


def caesar(s, k):
    return "".join(shift_char(c, k) for c in s)


def uncaesar(s, k):
    return caesar(s, 26 - k % 26)


def checksum(s):
    total = 0
    for i, c in enumerate(s):
        total = total + (i + 1) * ord(c)
    return total % 251


def swap_pairs(s):
    out = ""
    for i in range(0, len(s) - 1, 2):
        out = out + s[i + 1] + s[i]
    if len(s) % 2 == 1:
        out = out + s[-1]
    return out
