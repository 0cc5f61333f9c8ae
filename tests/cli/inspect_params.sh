#!/usr/bin/env bash
# `trainrt inspect` counts trainable parameters as PyTorch's sum(p.numel() for p in
# model.parameters()) does (BatchNormalization running statistics apart), with
# thousands separators in the table and as a number in --json: the built-in Wide
# ResNet at the seed's widths and at small widths, against tests/data/wrn_param_counts.json.
set -uo pipefail
trainrt=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

counts=$src/tests/data/wrn_param_counts.json
[ -s "$counts" ] || { echo "FAIL: missing $counts"; exit 1; }
want() { /usr/bin/python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print((j["small"] if sys.argv[2] == "small" else j)["trainable_parameters"][sys.argv[3]])' "$counts" "$1" "$2"; }

check() {  # size dataset widths
  local model=$tmp/wrn_$1_$2.onnx expected
  expected=$(want "$1" "$2")
  "$trainrt" model wrn --dataset "$2" --widths "$3" -o "$model" >/dev/null || { fail "model wrn --dataset $2 --widths $3 failed"; return; }
  "$trainrt" inspect "$model" >"$tmp/table" || fail "inspect $1 $2 exited $?"
  local line
  line=$(grep "^trainable parameters: " "$tmp/table")
  [ "$(/usr/bin/python3 -c 'import sys; print("{:,}".format(int(sys.argv[1])))' "$expected")" = "$(echo "$line" | awk '{print $3}')" ] ||
    fail "$1 $2: '$line', PyTorch counts $expected"
  "$trainrt" inspect "$model" --json >"$tmp/json" || fail "inspect --json $1 $2 exited $?"
  /usr/bin/python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["trainable_parameters"] == int(sys.argv[2]), j["trainable_parameters"]; assert j["parameters"] > j["trainable_parameters"]' \
    "$tmp/json" "$expected" || fail "$1 $2: inspect --json trainable_parameters is not $expected"
  echo "$1 $2: $line"
  rm -f "$model"
}

check full fashion-mnist 16,160,320,640
check full cifar100 16,160,320,640
for d in fashion-mnist cifar10 cifar100; do check small "$d" 4,8,12,16; done
[ "$fails" -eq 0 ] && echo "inspect_params: all checks passed"
exit $((fails > 0))
