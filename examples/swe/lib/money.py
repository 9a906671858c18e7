"""Money in integer cents."""


def add_tax(cents, percent):
    return cents + cents * percent // 100


def split_bill(cents, people):
    share = cents // people
    rest = cents - share * people
    return share, rest


def discount(cents, percent):
    if percent > 100:
        return 0
    return cents - cents * percent // 100


def can_pay(balance, price):
    return balance >= price


def change(paid, price):
    if paid < price:
        return -1
    return paid - price


def fmt(cents):
    return "%d.%02d" % (cents // 100, cents % 100)
