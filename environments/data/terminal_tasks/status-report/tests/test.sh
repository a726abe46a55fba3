#!/bin/bash
want=$'200 4\n404 2\n500 2\n301 1\n302 1'
[ -f reports/status.txt ] || { echo "reports/status.txt is missing"; exit 1; }
[ "$(sed 's/^ *//; s/  */ /g; s/ *$//' reports/status.txt)" = "$want" ] || { echo "reports/status.txt is wrong"; exit 1; }
[ -f reports/top_ip.txt ] && [ "$(tr -d ' \n' < reports/top_ip.txt)" = "10.0.0.1" ] || { echo "reports/top_ip.txt is wrong or missing"; exit 1; }
