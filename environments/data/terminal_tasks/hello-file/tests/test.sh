#!/bin/bash
[ -f hello.txt ] || { echo "hello.txt is missing"; exit 1; }
[ "$(cat hello.txt)" = "Hello, world!" ] || { echo "hello.txt has the wrong content"; exit 1; }
