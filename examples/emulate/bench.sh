#!/bin/sh
# The emulation's benchmark: a 10 MB TCP transfer (tcp_transfer.py) between two hosts one
# switch apart (a star, 10 us links) and four switches apart (chain4.yaml), at several link
# rates; per run the goodput, the delivery lateness (p50, p99: the emulation keeps up where
# the p99 stays under 50 us), fabemu's CPU time per frame (whole process and pacing loop) and
# the load average when it ran. Needs root; run from the repository's root:
#     sh examples/emulate/bench.sh [RATES...]        (default: 10Mbps 100Mbps 300Mbps 1Gbps)

FABEMU=${FABEMU:-target/release/fabemu}
RATES=${*:-10Mbps 100Mbps 300Mbps 1Gbps}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
printf '%-6s %-8s %10s %9s %9s %9s %10s %10s %s\n' hops rate goodput_bps late_p50 late_p99 \
    late_max cpu_us/fr pacer_us/fr load1
for rate in $RATES; do
    cat > "$TMP/star.yaml" <<YAML
name: bench-star
topology:
  star: {hosts: 2, bandwidth: $rate, latency: 10us}
YAML
    sed "s/1Gbps/$rate/" examples/emulate/chain4.yaml > "$TMP/chain.yaml"
    for hops in 1 4; do
        if [ "$hops" = 1 ]; then yaml=$TMP/star.yaml; else yaml=$TMP/chain.yaml; fi
        load=$(cut -d' ' -f1 /proc/loadavg)
        TRANSFER_BYTES=${TRANSFER_BYTES:-10000000} "$FABEMU" emulate "$yaml" --quiet --set until=120s \
            --json "$TMP/r.json" -- python3 examples/emulate/tcp_transfer.py > "$TMP/out.txt" 2>&1 \
            || { echo "$hops $rate: fabemu exited $? (output: $TMP/out.txt)"; tail -5 "$TMP/out.txt"; }
        python3 - "$TMP/r.json" "$TMP/out.txt" "$hops" "$rate" "$load" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
e = r["emulation"]
m = re.search(r"goodput_bps (\d+)", open(sys.argv[2]).read())
d = e["lateness"]["delivery"]
c = e.get("cpu", {})
print("%-6s %-8s %10s %9.1f %9.1f %9.1f %10.2f %10.2f %s" % (
    sys.argv[3], sys.argv[4], m.group(1) if m else "-", d["p50_ps"] / 1e6, d["p99_ps"] / 1e6,
    d["max_ps"] / 1e6, c.get("per_frame_us", 0), c.get("pacer_per_frame_us", 0), sys.argv[5]))
PY
    done
done
