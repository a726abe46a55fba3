#!/bin/bash
want_unique=$'alice\nbob\ncarol\ndave\nerin'
want_counts=$'alice 3\nbob 2\ncarol 2\ndave 1\nerin 1'
[ -f unique.txt ] && [ "$(cat unique.txt)" = "$want_unique" ] || { echo "unique.txt is wrong or missing"; exit 1; }
[ -f counts.txt ] && [ "$(sed 's/^ *//; s/  */ /g' counts.txt)" = "$want_counts" ] || { echo "counts.txt is wrong or missing"; exit 1; }
