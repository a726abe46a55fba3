import sys

sys.path.insert(0, ".")
from inventory import Store  # noqa: E402

s = Store()
s.add("bolt", 10, 5)
s.add("bolt", 5, 6)
assert s.items["bolt"] == (15, 6), s.items
s.remove("bolt", 15)
assert s.items["bolt"][0] == 0, s.items
try:
    s.remove("bolt", 1)
except ValueError:
    pass
else:
    raise AssertionError("removing more than stocked must raise ValueError")
s.add("nut", 1, 1205)
assert s.value() == "$12.05", s.value()
s.add("nut", 1, 5)
assert s.value() == "$0.10", s.value()
print("ok")
