#!/bin/bash
for n in beach cat sunset; do
    [ -f "photos/$n.jpg" ] || { echo "photos/$n.jpg is missing"; exit 1; }
    [ ! -e "photos/$n.jpeg" ] || { echo "photos/$n.jpeg still exists"; exit 1; }
    [ "$(cat "photos/$n.jpg")" = "jpeg data $n" ] || { echo "photos/$n.jpg has the wrong content"; exit 1; }
done
[ "$(cat photos/logo.png)" = "a png" ] || { echo "photos/logo.png was changed"; exit 1; }
[ "$(ls photos | wc -l)" = "4" ] || { echo "photos/ should hold exactly 4 files"; exit 1; }
