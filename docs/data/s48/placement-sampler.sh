#!/bin/bash
# Prints, every 20 ms, the CPU each chorus-perf process and the busy process (named hog) last ran on (ps psr).
while :; do ps -eo pid,psr,stat,comm --no-headers | awk '$4=="chorus-perf"||$4=="hog"{printf "%s:%s:%s ", $4, $1, $2}'; echo; sleep 0.02; done
