#!/usr/bin/env bash
# Thread behaviour on a shared machine: fabric64 on 1 and 2 threads, in three conditions, for
# one or more fabemu binaries run interleaved (e.g. the previous release and this build), so
# that the machine's drift hits all of them alike. Prints one line per run:
#   CONDITION BINARY threads=N MILLISECONDS ms
# Conditions:
#   pinned  every thread on CPU 0. The binary starts unpinned and is pinned 10 ms later with
#           `taskset -a -p`, after it has counted its CPUs: under `taskset -c 0` from the start,
#           --threads 2 is reduced to one thread (with a warning) and is simply the 1-thread run.
#   busy    a busy loop on CPU 1 (killed at the end).
#   free    both CPUs to fabemu: `chrt -f 10` (root) puts it ahead of other processes.
# Usage: benches/threads.sh [-n RUNS] [-c "pinned busy free"] BINARY...
# Summarize with e.g.: sort | awk '{print $1, $2, $3}' | uniq -c, or by eye (medians).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
runs=5
conditions="pinned busy free"
while getopts "n:c:" o; do
    case $o in
        n) runs=$OPTARG ;;
        c) conditions=$OPTARG ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-n RUNS] [-c CONDITIONS] BINARY..." >&2; exit 2; }
scenario=benches/fabric64.yaml
busy=""
trap '[ -n "$busy" ] && kill "$busy" 2>/dev/null || true' EXIT

one() { # condition binary threads
    case $1 in
        pinned)
            "$2" run $scenario --threads "$3" --quiet 2>/dev/null &
            local pid=$!
            sleep 0.01
            taskset -a -p -c 0 $pid >/dev/null
            wait $pid ;;
        free) chrt -f 10 "$2" run $scenario --threads "$3" --quiet 2>/dev/null ;;
        *) "$2" run $scenario --threads "$3" --quiet 2>/dev/null ;;
    esac
}

for c in $conditions; do
    if [ "$c" = busy ]; then
        taskset -c 1 sh -c 'while :; do :; done' &
        busy=$!
    fi
    for _ in $(seq "$runs"); do
        for b in "$@"; do
            for t in 1 2; do
                s=$(date +%s%N)
                one "$c" "$b" $t
                e=$(date +%s%N)
                echo "$c $b threads=$t $(( (e - s) / 1000000 )) ms"
            done
        done
    done
    if [ -n "$busy" ]; then
        kill "$busy"
        busy=""
    fi
done
