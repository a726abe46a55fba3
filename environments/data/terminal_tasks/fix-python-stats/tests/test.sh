#!/bin/bash
python3 "$TESTS_DIR/test_stats.py"
