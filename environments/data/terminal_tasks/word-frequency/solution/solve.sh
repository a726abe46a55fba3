#!/bin/bash
tr -cs 'A-Za-z' '\n' < text.txt | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2,2 | head -n 3 | sed -E 's/^ *([0-9]+) (.*)/\2 \1/' > top3.txt
