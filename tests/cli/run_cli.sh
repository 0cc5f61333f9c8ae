#!/usr/bin/env bash
# `trainrt run` end to end on ONNX's own test models (Debian libonnx-testdata),
# outputs compared with the expected output_K.pb by numpy (rtol 1e-3, atol 1e-7,
# integers exact), and every bad-input path: exit 2, exactly one stderr line
# naming the problem, and no output_*.pb left behind.
#
#   bash tests/cli/run_cli.sh build/trainrt .      (CTest runs it this way)
set -euo pipefail
trainrt=$1
src=$2
data=/usr/share/libonnx-testdata/data/node
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
[ -x "$trainrt" ] || { echo "run_cli.sh: $trainrt is not an executable (build it first)"; exit 2; }
[ -d "$src/tests/cli" ] || { echo "run_cli.sh: $src is not the trainrt source folder"; exit 2; }
[ -d "$data" ] || { echo "run_cli.sh: $data is missing (install the Debian package libonnx-testdata)"; exit 2; }

tests="test_relu test_gemm_default_matrix_bias test_conv_with_strides_padding test_maxpool_2d_pads
       test_batchnorm_example test_dropout_default_mask"

# Graph inputs that are not initializers, in order: "<test> <name>..." per line.
# shellcheck disable=SC2086
"$py" - "$data" $tests >"$tmp/inputs" <<'PY'
import onnx, sys
for test in sys.argv[2:]:
    m = onnx.load(f"{sys.argv[1]}/{test}/model.onnx")
    init = {t.name for t in m.graph.initializer}
    print(test, *[i.name for i in m.graph.input if i.name not in init])
PY

# run_test TEST BACKEND: trainrt run on test_data_set_0; each output file goes to
# $tmp/pairs ("label got want") for one numpy comparison at the end.
run_test() {
  local test=$1 backend=$2 dir=$data/$1 out=$tmp/ok_$1_$2 args=() k=0 name names
  read -r -a names < <(grep "^$test " "$tmp/inputs")
  for name in "${names[@]:1}"; do
    args+=(--input "$name=$dir/test_data_set_0/input_$k.pb")
    k=$((k + 1))
  done
  if ! "$trainrt" run "$dir/model.onnx" "${args[@]}" --backend "$backend" --output-dir "$out" >"$tmp/stdout" 2>"$tmp/stderr"; then
    fail "$test on $backend: trainrt run exited non-zero: $(cat "$tmp/stderr")"
    return 0
  fi
  local want n=0
  for want in "$dir"/test_data_set_0/output_*.pb; do
    n=$((n + 1))
    echo "$test/$backend/$(basename "$want") $out/$(basename "$want") $want" >>"$tmp/pairs"
  done
  [ "$(grep -c 'output_.*\.pb' "$tmp/stdout")" -eq "$n" ] || fail "$test on $backend: stdout does not list the $n output files: $(cat "$tmp/stdout")"
  [ -s "$tmp/stderr" ] && fail "$test on $backend: succeeded but wrote to stderr: $(cat "$tmp/stderr")"
  return 0
}

: >"$tmp/pairs"
for backend in reference cpu; do
  for test in $tests; do
    run_test "$test" "$backend"
  done
done
# dtype, shape and values as onnx's backend test runner checks them.
"$py" - "$tmp/pairs" <<'PY' || fail "outputs differ from ONNX's expected outputs (lines above)"
import sys, numpy as np, onnx
from onnx import numpy_helper
def load(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)
bad = 0
for line in open(sys.argv[1]):
    label, got_path, want_path = line.split()
    try:
        got, want = load(got_path), load(want_path)
        if got.dtype != want.dtype or got.shape != want.shape:
            raise AssertionError(f"{got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}")
        if np.issubdtype(want.dtype, np.floating):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-7)
        elif not np.array_equal(got, want):
            raise AssertionError(f"values differ: {got.ravel()[:8]} vs {want.ravel()[:8]}")
    except (AssertionError, OSError) as e:
        print(f"FAIL: {label}: " + " ".join(str(e).split())[:400])
        bad += 1
sys.exit(1 if bad else 0)
PY

# ---------------------------------------------------------------- bad input
relu=$data/test_relu/model.onnx
x=$data/test_relu/test_data_set_0/input_0.pb  # float32 [3,4,5]
"$py" - "$tmp" <<'PY'
import sys, numpy as np
from onnx import numpy_helper
tmp = sys.argv[1]
def save(name, a):
    with open(f"{tmp}/{name}", "wb") as f:
        f.write(numpy_helper.from_array(a, "x").SerializeToString())
save("x_f64.pb", np.zeros((3, 4, 5), np.float64))
save("x_shape.pb", np.zeros((3, 4), np.float32))
PY
head -c 40 "$x" >"$tmp/x_truncated.pb"
printf 'this is not a tensor\n' >"$tmp/x_text.pb"

# expect_bad LABEL PATTERN ARGS...: `trainrt run ARGS` must exit 2 with one stderr line
# matching PATTERN (grep -E) and leave no output_*.pb in $tmp/bad.
expect_bad() {
  local label=$1 pattern=$2 rc=0
  shift 2
  rm -rf "$tmp/bad"
  "$trainrt" run "$@" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
  local lines
  lines=$(wc -l <"$tmp/stderr")
  if [ "$rc" -ne 2 ]; then
    fail "$label: exit code $rc, expected 2 (stderr: $(head -c 300 "$tmp/stderr"))"
  elif [ "$lines" -ne 1 ]; then
    fail "$label: $lines stderr lines, expected 1: $(head -c 500 "$tmp/stderr")"
  elif ! grep -Eq -- "$pattern" "$tmp/stderr"; then
    fail "$label: stderr does not match '$pattern': $(cat "$tmp/stderr")"
  else
    echo "ok: $label: $(cat "$tmp/stderr")"
  fi
  if compgen -G "$tmp/bad/output_*.pb" >/dev/null; then
    fail "$label: left $(cd "$tmp/bad" && echo output_*.pb) behind"
  fi
  return 0
}

expect_bad "missing --output-dir" "--output-dir is required" \
  "$relu" --input "x=$x"
expect_bad "--input without '='" "--input $x: expected NAME=FILE.pb" \
  "$relu" --input "$x" --output-dir "$tmp/bad"
expect_bad "unknown input name" "input 'nope'.*not an input of the model" \
  "$relu" --input "x=$x" --input "nope=$x" --output-dir "$tmp/bad"
expect_bad "missing required input" "input 'x'.*required" \
  "$relu" --output-dir "$tmp/bad"
expect_bad "input given twice" "input 'x' is given twice" \
  "$relu" --input "x=$x" --input "x=$x" --output-dir "$tmp/bad"
expect_bad "wrong dtype" "input 'x'.*expected float32, got float64" \
  "$relu" --input "x=$tmp/x_f64.pb" --output-dir "$tmp/bad"
expect_bad "wrong shape" "input 'x'.*expected shape \[3,4,5\], got \[3,4\]" \
  "$relu" --input "x=$tmp/x_shape.pb" --output-dir "$tmp/bad"
expect_bad "truncated .pb input" "x_truncated.pb.*(truncated|not a valid)" \
  "$relu" --input "x=$tmp/x_truncated.pb" --output-dir "$tmp/bad"
expect_bad "non-existent input file" "$tmp/missing.pb: cannot open" \
  "$relu" --input "x=$tmp/missing.pb" --output-dir "$tmp/bad"
expect_bad "file that is not a TensorProto" "x_text.pb: is not a valid ONNX TensorProto" \
  "$relu" --input "x=$tmp/x_text.pb" --output-dir "$tmp/bad"
expect_bad "a model given as an input tensor" "model.onnx: .*(not supported|not a valid|no data_type)" \
  "$relu" --input "x=$relu" --output-dir "$tmp/bad"
expect_bad "unknown flag" "unknown flag --bogus" \
  "$relu" --input "x=$x" --output-dir "$tmp/bad" --bogus 1
expect_bad "unknown --backend" "unknown backend 'tpu'" \
  "$relu" --input "x=$x" --output-dir "$tmp/bad" --backend tpu
expect_bad "non-existent model" "$tmp/none.onnx: cannot open" \
  "$tmp/none.onnx" --input "x=$x" --output-dir "$tmp/bad"
expect_bad "no model" "usage: trainrt run" \
  --input "x=$x" --output-dir "$tmp/bad"
touch "$tmp/a_file"
expect_bad "--output-dir is a file" "a_file: cannot create the output folder" \
  "$relu" --input "x=$x" --output-dir "$tmp/a_file"

# A failure while writing the second of two outputs must not leave the first behind.
mask=$data/test_dropout_default_mask
rm -rf "$tmp/bad" && mkdir -p "$tmp/bad/output_1.pb"  # a folder where output_1.pb must go
rc=0
"$trainrt" run "$mask/model.onnx" --input "x=$mask/test_data_set_0/input_0.pb" --output-dir "$tmp/bad" \
  >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
[ "$rc" -eq 2 ] || fail "unwritable output_1.pb: exit code $rc, expected 2 ($(cat "$tmp/stderr"))"
grep -q "output_1.pb" "$tmp/stderr" || fail "unwritable output_1.pb: stderr does not name it: $(cat "$tmp/stderr")"
[ -e "$tmp/bad/output_0.pb" ] && fail "unwritable output_1.pb: output_0.pb was left behind"

if [ "$fails" -ne 0 ]; then
  echo "run_cli.sh: $fails check(s) failed"
  exit 1
fi
echo "run_cli.sh: all checks passed"
