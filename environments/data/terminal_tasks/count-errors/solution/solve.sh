#!/bin/bash
grep -cw ERROR logs/app.log > error_count.txt
