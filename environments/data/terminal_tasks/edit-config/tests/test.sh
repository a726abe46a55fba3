#!/bin/bash
want='# server settings
[server]
host = 127.0.0.1
port = 9090
debug = false

[cache]
debug = true
size = 64'
[ "$(cat server.ini)" = "$want" ] || { echo "server.ini is not as required"; exit 1; }
