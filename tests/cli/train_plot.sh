#!/usr/bin/env bash
# `trainrt plot`: a PNG and an SVG are drawn from a small metrics file (epoch and
# step lines), a file with only epoch lines works too, and malformed files exit 2
# with one stderr line naming the file and line; no image is left behind then.
set -uo pipefail
trainrt=$(realpath "$1")
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

m=$tmp/metrics.jsonl
cat >"$m" <<'EOF'
{"kind":"step","step":50,"epoch":1,"loss":2.1,"lr":0.01}
{"kind":"step","step":100,"epoch":1,"loss":1.3,"lr":0.01}
{"kind":"epoch","epoch":1,"epoch_time":10.5,"train_loss":1.6,"val_loss":1.2,"val_accuracy":0.61,"images_per_sec":300.0,"cumulative_time":10.5,"lr":0.01}
{"kind":"step","step":150,"epoch":2,"loss":0.9,"lr":0.01}

{"kind":"step","step":200,"epoch":2,"loss":0.7,"lr":0.01}
{"kind":"epoch","epoch":2,"epoch_time":10.1,"train_loss":0.8,"val_loss":0.75,"val_accuracy":0.74,"images_per_sec":310.0,"cumulative_time":20.6,"lr":0.01}
{"kind":"epoch","epoch":3,"epoch_time":10.2,"train_loss":0.6,"val_loss":0.66,"val_accuracy":0.79,"images_per_sec":305.0,"cumulative_time":30.8,"lr":0.01}
EOF
"$trainrt" plot "$m" -o "$tmp/curves.png" >"$tmp/log" 2>&1 || fail "plot png: $(cat "$tmp/log")"
grep -q "Wrote $tmp/curves.png (3 epochs, 4 step points)" "$tmp/log" || fail "plot message: $(cat "$tmp/log")"
[ "$(head -c 8 "$tmp/curves.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "curves.png is not a PNG"
[ "$(stat -c %s "$tmp/curves.png" 2>/dev/null || echo 0)" -gt 5000 ] || fail "curves.png is suspiciously small"
"$trainrt" plot "$m" -o "$tmp/curves.svg" --title "run 1" >"$tmp/log" 2>&1 || fail "plot svg: $(cat "$tmp/log")"
/usr/bin/python3 - "$tmp/curves.svg" <<'PY' || fail "curves.svg check"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag.endswith("svg"), root.tag
text = open(sys.argv[1]).read()
for label in ["validation accuracy", "validation loss", "train loss", "step loss", "run 1"]:
    assert label in text, label
PY
grep -v '"step"' "$m" >"$tmp/epochs.jsonl"
"$trainrt" plot "$tmp/epochs.jsonl" -o "$tmp/e.svg" >"$tmp/log" 2>&1 || fail "epoch-only plot: $(cat "$tmp/log")"
grep -q "step loss" "$tmp/e.svg" && fail "epoch-only plot has a step panel"
ls -a "$tmp" | grep -q '\.tmp' && fail "temporary image left: $(ls -a "$tmp")"

# Malformed files: the line number is named, no image written.
{ head -2 "$m"; echo '{"kind":"epoch","epoch":2,"train_loss":0.8,"val_loss" 0.75}'; } >"$tmp/bad1.jsonl"
expect_error 2 "bad1.jsonl:3: expected ':' at column" -- "$trainrt" plot "$tmp/bad1.jsonl" -o "$tmp/bad.png"
{ head -3 "$m"; echo '{"kind":"epoch","epoch":2,"train_loss":0.8,"val_loss":0.7}'; } >"$tmp/bad2.jsonl"
expect_error 2 "bad2.jsonl:4: missing field \"val_accuracy\"" -- "$trainrt" plot "$tmp/bad2.jsonl" -o "$tmp/bad.png"
echo 'Epoch = 1: Epoch Time = 3' >"$tmp/bad3.jsonl"
expect_error 2 "bad3.jsonl:1: expected '{' at column 1" -- "$trainrt" plot "$tmp/bad3.jsonl" -o "$tmp/bad.png"
{ head -1 "$m"; echo '{"kind":"epoch","epoch":1,"train_loss":1,"val_loss":1,"val_accuracy":0.5} trailing'; } >"$tmp/bad4.jsonl"
expect_error 2 "bad4.jsonl:2: unexpected text after the object" -- "$trainrt" plot "$tmp/bad4.jsonl" -o "$tmp/bad.png"
: >"$tmp/empty.jsonl"
expect_error 2 "empty.jsonl: has no epoch or step lines" -- "$trainrt" plot "$tmp/empty.jsonl" -o "$tmp/bad.png"
expect_error 2 "missing.jsonl: cannot open" -- "$trainrt" plot "$tmp/missing.jsonl" -o "$tmp/bad.png"
expect_error 2 "the image must end in .png or .svg" -- "$trainrt" plot "$m" -o "$tmp/bad.pdf"
expect_error 2 "needs -o" -- "$trainrt" plot "$m"
[ -e "$tmp/bad.png" ] && fail "an image was written for a bad file"
# gnuplot missing: a clear error, exit 2.
expect_error 2 "gnuplot was not found" -- env TRAINRT_GNUPLOT=/nonexistent/gnuplot "$trainrt" plot "$m" -o "$tmp/x.png"

[ $fails -eq 0 ] && echo "train_plot: all checks passed"
exit $((fails > 0))
