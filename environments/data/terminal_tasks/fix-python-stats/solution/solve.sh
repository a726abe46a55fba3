#!/bin/bash
sed -i 's/for v in values\[1:\]:/for v in values:/; s|return ordered\[mid\] + ordered\[mid - 1\] / 2|return (ordered[mid] + ordered[mid - 1]) / 2|' stats.py
