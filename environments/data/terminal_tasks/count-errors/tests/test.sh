#!/bin/bash
[ -f error_count.txt ] || { echo "error_count.txt is missing"; exit 1; }
got=$(tr -d ' \n' < error_count.txt)
[ "$got" = "3" ] || { echo "expected 3, got '$got'"; exit 1; }
[ "$(grep -c '' logs/app.log)" = "8" ] || { echo "logs/app.log was modified"; exit 1; }
