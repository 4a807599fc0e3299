#!/bin/bash
# One replica's capacity beside two's, measured the same way (sandbox calibrate --force) on one stack.
cd "$(dirname "$0")/../../.."; OUT=${OUT:-/tmp/fleet-calibration}; mkdir -p "$OUT"
set -x
.venv/bin/sandbox up
.venv/bin/sandbox calibrate --force --profile default --json > $OUT/two-replicas.json
.venv/bin/sandbox deploy --set replicas=1
.venv/bin/sandbox calibrate --force --profile default --json > $OUT/one-replica.json
.venv/bin/sandbox deploy --set replicas=2
.venv/bin/sandbox calibrate --force --profile default --json > $OUT/two-replicas-again.json
.venv/bin/sandbox down
echo done
