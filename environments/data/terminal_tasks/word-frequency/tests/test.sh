#!/bin/bash
# Terminal-Bench style: the verdict goes to the reward file.
want=$'the 7\ncat 4\na 3'
if [ -f top3.txt ] && [ "$(sed 's/^ *//; s/  */ /g; s/ *$//' top3.txt)" = "$want" ]; then
    echo 1 > "$LOGS_DIR/verifier/reward.txt"
else
    echo "top3.txt is wrong or missing"
    echo 0 > "$LOGS_DIR/verifier/reward.txt"
fi
