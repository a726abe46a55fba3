import sys

sys.path.insert(0, ".")
from stats import mean, median  # noqa: E402

assert mean([1, 2, 3, 4]) == 2.5, "mean([1, 2, 3, 4])"
assert mean([5]) == 5, "mean([5])"
assert median([3, 1, 2]) == 2, "median([3, 1, 2])"
assert median([4, 1, 3, 2]) == 2.5, "median([4, 1, 3, 2])"
assert median([10, 20]) == 15, "median([10, 20])"
print("ok")
