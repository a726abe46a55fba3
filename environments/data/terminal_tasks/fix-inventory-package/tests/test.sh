#!/bin/bash
cd "$APP_DIR" && python3 "$TESTS_DIR/test_inventory.py"
