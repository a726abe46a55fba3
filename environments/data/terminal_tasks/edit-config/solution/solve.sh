#!/bin/bash
sed -i '/^\[server\]/,/^\[/{s/^port = .*/port = 9090/; s/^debug = .*/debug = false/}' server.ini
