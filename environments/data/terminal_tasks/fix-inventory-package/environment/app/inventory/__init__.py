from inventory.store import Store

__all__ = ["Store"]
