#!/bin/bash
[ -f west_total.txt ] || { echo "west_total.txt is missing"; exit 1; }
got=$(tr -d ' \n' < west_total.txt)
[ "$got" = "49.50" ] || { echo "wrong total: '$got'"; exit 1; }
