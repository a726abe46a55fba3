#!/bin/bash
[ -x bin/greet ] || { echo "bin/greet is missing or not executable"; exit 1; }
[ "$(./bin/greet Ada)" = "Hello, Ada!" ] || { echo "wrong greeting for an argument"; exit 1; }
[ "$(./bin/greet)" = "Hello, stranger!" ] || { echo "wrong greeting without arguments"; exit 1; }
