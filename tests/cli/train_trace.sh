#!/usr/bin/env bash
# `trainrt train --trace` writes a Chrome trace whose node lane holds every node of
# the traced steps and whose data lanes hold one slice per traced batch;
# `--detect-anomaly` names the first node whose output is not finite.
set -uo pipefail
trainrt=$(realpath "$1")
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

model=$tmp/wrn.onnx
"$trainrt" model wrn --dataset fashion-mnist --widths 4,8,8,8 --blocks-per-stage 1 -o "$model" >/dev/null ||
  { echo "FAIL: model wrn"; exit 1; }
base=(train "$model" --dataset fashion-mnist --limit-train 128 --limit-test 32 --batch-size 32 --threads 2 --epochs 1
  --log-every 0)

"$trainrt" "${base[@]}" --trace "$tmp/t.json" --trace-steps 2 >"$tmp/log" 2>&1 || fail "trace run: $(tail -3 "$tmp/log")"
grep -q "Trace of 2 steps written to $tmp/t.json" "$tmp/log" || fail "no trace message: $(cat "$tmp/log")"
grep -Eq "^ConvGrad +[0-9]+ " "$tmp/log" || fail "no per-op table: $(cat "$tmp/log")"
/usr/bin/python3 - "$tmp/t.json" "$model" <<'PY' || fail "trace contents"
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
lanes = collections.Counter(names.get(e["tid"]) for e in ev if e.get("ph") == "X")
assert lanes["data: prepare batch"] == 2 and lanes["data: consumer wait"] == 2 and lanes["train step"] == 2, lanes
# Node events: every node of the training graph once per traced step, so a multiple of 2,
# and the forward Convs of the model (5 in this model) twice each.
node_lane = [t for t, n in names.items() if n not in ("data: prepare batch", "data: consumer wait", "train step")]
nodes = [e for e in ev if e.get("ph") == "X" and e["tid"] in node_lane]
assert len(nodes) > 50 and len(nodes) % 2 == 0, len(nodes)
steps = sorted((e for e in ev if e.get("ph") == "X" and names.get(e["tid"]) == "train step"), key=lambda e: e["ts"])
for e in nodes:  # every node slice lies inside one of the step slices
    assert any(s["ts"] - 1 <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1 for s in steps), e
PY
# The 1st step is not traced (it plans): with --trace-steps larger than the run, all later steps are.
# (With the --momentum of the anomaly run below: its training graph, whose nodes this trace lists.)
"$trainrt" "${base[@]}" --momentum 0.9 --trace "$tmp/t2.json" --trace-steps 100 >"$tmp/log" 2>&1 || fail "trace run 2"
grep -q "Trace of 3 steps written" "$tmp/log" || fail "expected 3 traced steps of 4: $(grep Trace "$tmp/log")"

"$trainrt" "${base[@]}" --base-lr 1e30 --momentum 0.9 --detect-anomaly >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] || fail "--detect-anomaly run exited $rc"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "expected one stderr line: $(cat "$tmp/err")"
grep -Eq "training: at epoch 1 step [0-9]+ \(global step [0-9]+\): first non-finite value: node [0-9]+ '[^']+' \([A-Za-z]+\): output '[^']+' has (NaN|Inf)" \
  "$tmp/err" || fail "--detect-anomaly message: $(cat "$tmp/err")"
# The node it names is a node of that training graph, with the index and op type the
# message gives (as the trace of the same graph lists them), run once in each traced step.
/usr/bin/python3 - "$tmp/err" "$tmp/t2.json" <<'PY' || fail "--detect-anomaly named node: $(cat "$tmp/err")"
import json, re, sys
m = re.search(r"first non-finite value: node ([0-9]+) '([^']+)' \(([A-Za-z]+)\)", open(sys.argv[1]).read())
assert m, "no node named"
node = (int(m.group(1)), m.group(2), m.group(3))
ev = [e for e in json.load(open(sys.argv[2]))["traceEvents"] if e.get("ph") == "X" and e.get("tid") == 1]
traced = {(e["args"]["node"], e["name"], e["args"]["op"]) for e in ev}
assert node in traced, (node, "is not a node of the traced graph; by index or name:",
                        sorted(n for n in traced if n[0] == node[0] or n[1] == node[1]))
assert sum(1 for e in ev if e["name"] == node[1]) == 3, "expected once per traced step"
PY

[ $fails -eq 0 ] && echo "train_trace: all checks passed"
exit $((fails > 0))
