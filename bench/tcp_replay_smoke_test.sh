#!/usr/bin/env bash
# tcp_replay on 127.0.0.1: 2 workers and 2 servers replay 20 steps and each
# worker prints its median; bad flags are refused, naming the flag.
set -euo pipefail
bin="$(dirname "$0")/tcp_replay"
[ -x "$bin" ] || bin="bazel-bin/bench/tcp_replay"
port=$(( 20000 + RANDOM % 20000 ))
"$bin" --role=server --port=$port --workers=2 & s0=$!
"$bin" --role=server --port=$((port + 1)) --workers=2 & s1=$!
trap 'kill $s0 $s1 2>/dev/null || true' EXIT
servers="127.0.0.1:$port,127.0.0.1:$((port + 1))"
messages="0:4000,1:300,0:65536,1:65536"
out0=$(mktemp) out1=$(mktemp)
"$bin" --role=worker --servers=$servers --messages=$messages --steps=20 --compute_us=100 > "$out0" &
w0=$!
"$bin" --role=worker --servers=$servers --messages=$messages --steps=20 --compute_us=100 > "$out1"
wait $w0
cat "$out0" "$out1"
for f in "$out0" "$out1"; do
  grep -qE "^comm_us median [0-9]+ p10 [0-9]+ p90 [0-9]+$" "$f" || { echo "no median line"; exit 1; }
done
err=$("$bin" --role=worker --servers=$servers --messages=0:x 2>&1 || true)
grep -q -- '--messages: "0:x" is not NAME:NUMBER' <<< "$err" || { echo "bad message accepted: $err"; exit 1; }
err=$("$bin" --role=worker --servers=$servers --messages=5:10 2>&1 || true)
grep -q "server out of range" <<< "$err" || { echo "bad server accepted: $err"; exit 1; }
# --answer=each (dist_async's rule): a server of 2 workers answers the one
# that sends while the other, connected, sends nothing (--answer=all would
# wait for it forever).
"$bin" --role=server --port=$((port + 2)) --workers=2 --answer=each & s2=$!
trap 'kill $s0 $s1 $s2 2>/dev/null || true' EXIT
for _ in $(seq 100); do { exec 3<>/dev/tcp/127.0.0.1/$((port + 2)); } 2>/dev/null && break; sleep 0.1; done
out=$(timeout 20 "$bin" --role=worker --servers=127.0.0.1:$((port + 2)) --messages=0:1000 \
      --steps=10 --compute_us=0)
exec 3>&-
grep -qE "^comm_us median [0-9]+ p10" <<< "$out" || { echo "each: no median line: $out"; exit 1; }
# A server goes on answering the workers that are left when one is done:
# here the first stops after 5 steps, the second needs 40.
"$bin" --role=server --port=$((port + 4)) --workers=2 --answer=each --sndbuf=16384 & s4=$!
trap 'kill $s0 $s1 $s2 $s4 2>/dev/null || true' EXIT
short=$(mktemp)
timeout 20 "$bin" --role=worker --servers=127.0.0.1:$((port + 4)) --messages=0:1000 \
  --steps=5 --compute_us=0 --sndbuf=16384 > "$short" & w4=$!
long=$(timeout 20 "$bin" --role=worker --servers=127.0.0.1:$((port + 4)) --messages=0:70000 \
       --steps=40 --compute_us=2000)
wait $w4
grep -qE "^comm_us median [0-9]+ p10" "$short" || { echo "short: no median line"; exit 1; }
grep -qE "^comm_us median [0-9]+ p10" <<< "$long" || { echo "left alone: no median line: $long"; exit 1; }
err=$("$bin" --role=worker --servers=$servers --messages=0:10 --sndbuf=-1 2>&1 || true)
grep -q -- "--sndbuf must be >= 0" <<< "$err" || { echo "bad sndbuf accepted: $err"; exit 1; }
err=$("$bin" --role=server --port=$((port + 3)) --answer=some 2>&1 || true)
grep -q -- '--answer: expected all or each, got "some"' <<< "$err" || { echo "bad answer accepted: $err"; exit 1; }
err=$("$bin" --role=nobody 2>&1 || true)
grep -q -- '--role: expected server or worker' <<< "$err" || { echo "bad role accepted: $err"; exit 1; }
echo "tcp_replay smoke: ok"
