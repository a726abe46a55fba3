"""An in-memory stock keeper."""

from inventory.money import format_cents


class Store:
    def __init__(self):
        self.items = {}  # name -> (quantity, unit price in cents)

    def add(self, name, quantity, price_cents):
        """Adds `quantity` units; the unit price is updated to `price_cents`."""
        old, _ = self.items.get(name, (0, price_cents))
        self.items[name] = (quantity, price_cents)

    def remove(self, name, quantity):
        """Removes `quantity` units; raises ValueError if there are not enough."""
        have, price = self.items.get(name, (0, 0))
        if quantity >= have:
            raise ValueError(f"not enough {name}")
        self.items[name] = (have - quantity, price)

    def value(self):
        """Total stock value, formatted like $12.34."""
        return format_cents(sum(q * p for q, p in self.items.values()))
