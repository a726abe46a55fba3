#!/bin/bash
printf '%.2f\n' "$(grep '^[^,]*,west,' sales.csv | cut -d, -f4 | paste -sd+ - | bc)" > west_total.txt
