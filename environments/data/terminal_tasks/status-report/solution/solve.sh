#!/bin/bash
mkdir -p reports
sed -E 's/.* ([0-9]{3}) [0-9]+$/\1/' access.log | sort | uniq -c | sort -k1,1nr -k2,2n | sed -E 's/^ *([0-9]+) (.*)/\2 \1/' > reports/status.txt
cut -d' ' -f1 access.log | sort | uniq -c | sort -k1,1nr | head -n 1 | sed -E 's/^ *[0-9]+ //' > reports/top_ip.txt
