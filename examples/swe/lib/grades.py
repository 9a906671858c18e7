"""Grade book helpers."""


def letter(score):
    if score >= 90:
        return "A"
    if score >= 80:
        return "B"
    if score >= 70:
        return "C"
    return "F"


def average(scores):
    if not scores:
        return 0
    return sum(scores) / len(scores)


def passed(score, pass_mark):
    return score >= pass_mark


def curve(scores, bonus):
    return [min(100, s + bonus) for s in scores]


def best(scores):
    top = scores[0]
    for s in scores[1:]:
        if s > top:
            top = s
    return top


def count_failing(scores, pass_mark):
    return len([s for s in scores if s < pass_mark])
