# (Named .bash so that the tests/cli/*.sh glob does not make it a test of its own.)
# Shared by the CLI test scripts (source it after setting trainrt/src):
#   $tmp                  a temporary folder, removed at exit (a failed script first
#                         prints the sanitizer reports its files hold)
#   fail MESSAGE          records a failure (the script ends with: exit $((fails > 0)))
#   expect_error CODE PATTERN -- command...
#                         the command exits CODE with exactly one stderr line matching
#                         PATTERN (the CLI's error contract)
#   cpu_path NAME         true when the cpu backend takes path NAME here ("blocked
#                         layouts", "Winograd", "bf16"), as `trainrt --version` reports
#                         it: what oneDNN dispatches to, ONEDNN_MAX_CPU_ISA included,
#                         not what /proc/cpuinfo lists
#   small_wrn             writes the inspect tests' model, a Fashion-MNIST Wide ResNet of
#                         widths 4,8,12,16, to $model (= $tmp/wrn.onnx)
tmp=$(mktemp -d)
fails=0
# At exit a failed script first prints every sanitizer report its logs in $tmp hold
# (a failure message quotes a log's last lines, which for a sanitizer are its summary).
on_exit() {
  if [ "$fails" -gt 0 ]; then
    grep -rlE "^==[0-9]+==ERROR: [A-Za-z]+Sanitizer" "$tmp" 2>/dev/null | while read -r f; do
      echo "== sanitizer report in ${f#"$tmp"/}:"
      sed -n '/^==[0-9]*==ERROR: [A-Za-z]*Sanitizer/,/^SUMMARY: /p' "$f"
    done
  fi
  rm -rf "$tmp"
}
trap on_exit EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect_error() {
  local code=$1 pattern=$2
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" -eq "$code" ] || fail "'$*' exited $rc, expected $code (stderr: $(head -c 300 "$tmp/err"))"
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "'$*' printed $(wc -l <"$tmp/err") stderr lines, expected 1: $(cat "$tmp/err")"
  grep -q -- "$pattern" "$tmp/err" || fail "'$*' stderr lacks '$pattern': $(cat "$tmp/err")"
}
cpu_path() {
  "$trainrt" --version | grep "^  cpu " | grep -q "$1 on"
}
small_wrn() {
  model=$tmp/wrn.onnx
  "$trainrt" model wrn --dataset fashion-mnist --widths 4,8,12,16 -o "$model" >/dev/null || fail "model wrn failed"
}
