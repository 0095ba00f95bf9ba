"""A tiny application: the code under test."""


def add(a, b):
    return a + b


def mean(values):
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)
