"""Calendar helpers (Gregorian)."""


def is_leap(year):
    if year % 400 == 0:
        return True
    if year % 100 == 0:
        return False
    return year % 4 == 0


def days_in_month(year, month):
    if month == 2:
        return 29 if is_leap(year) else 28
    if month in (4, 6, 9, 11):
        return 30
    return 31


def day_of_year(year, month, day):
    total = day
    for m in range(1, month):
        total = total + days_in_month(year, m)
    return total


def hms(seconds):
    h = seconds // 3600
    m = seconds % 3600 // 60
    s = seconds % 60
    return "%d:%02d:%02d" % (h, m, s)


def weeks_and_days(days):
    return days // 7, days % 7
