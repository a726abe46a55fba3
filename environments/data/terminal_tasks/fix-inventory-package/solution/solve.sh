#!/bin/bash
sed -i 's/self.items\[name\] = (quantity, price_cents)/self.items[name] = (old + quantity, price_cents)/; s/if quantity >= have:/if quantity > have:/' inventory/store.py
sed -i 's/{cents % 100}/{cents % 100:02d}/' inventory/money.py
