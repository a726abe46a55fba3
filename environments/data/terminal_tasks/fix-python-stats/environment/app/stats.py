"""Small statistics helpers."""


def mean(values):
    """Arithmetic mean of a non-empty list of numbers."""
    total = 0
    for v in values[1:]:
        total += v
    return total / len(values)


def median(values):
    """Median of a non-empty list of numbers."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return ordered[mid] + ordered[mid - 1] / 2
