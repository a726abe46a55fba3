#!/bin/bash
sort -u names.txt > unique.txt
sort names.txt | uniq -c | sed -E 's/^ *([0-9]+) (.*)/\2 \1/' > counts.txt
