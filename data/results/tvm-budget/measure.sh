#!/bin/bash
# The MetaSchedule budget curve of docs/compilers.md ("Choosing the budget"),
# measured again from the two committed databases: for k trials per task,
# the database cut to each task's first k records (in the order they were
# measured: what a run stopped at k per task had seen), built and timed
# with dlas_tvm.py check (30 runs, median); untuned is the build without a
# database. Needs `cargo xtask setup --tvm` and an otherwise idle machine
# (TVM's two threads wait for each other: any co-runner, even at nice 19,
# slowed these builds up to 7x here). Writes checks/<network>-k<k>.json,
# then measures ONNX Runtime and OpenVINO in the same sitting with
# `dlas run` (references.csv); make_curve.py turns them into curve.csv.
#
# How the databases were made (one run each, seed 1, population 128, GEMM,
# 2 threads; dlas_tvm.py as `dlas tune` runs it):
#   dlas_tvm.py tune --model cifar10-resnet18.onnx --input-shape 1,3,32,32 \
#     --algorithm gemm --trials-per-task 16 --work-dir cifar10-resnet18-gemm \
#     --threads 2 --seed 1 --population 128
set -euo pipefail
root=$(git rev-parse --show-toplevel)
here=$root/data/results/tvm-budget
py=$root/.cache/tvm/venv/bin/python
helper=$root/crates/dlas-backends/tvm/dlas_tvm.py
models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
mkdir -p "$here/checks"
for net in cifar10-resnet18 cifar10-mobilenetv2; do
  "$root/target/release/dlas" zoo export --dataset cifar10 --out "$models/$net.onnx" "${net#cifar10-}" >/dev/null
  check() {
    "$py" "$helper" check --model "$models/$net.onnx" --input-shape 1,3,32,32 \
      --algorithm gemm --threads 2 "$@"
  }
  check --runs 5 > "$here/checks/$net-untuned.json"
  for k in 1 2 4 8 16; do
    db=$models/$net-k$k
    python3 "$here/make_curve.py" cut "$here/$net-gemm" "$db" "$k"
    check --runs 30 --database "$db" > "$here/checks/$net-k$k.json"
  done
done
rm -f "$here"/references.csv "$here"/references.samples.jsonl "$here"/env-*.json
"$root/target/release/dlas" run --device host --runs 50 --out "$here/references.csv" \
  --filter "dataset=cifar10,model=resnet18|mobilenetv2,compression=dense,tuned=false,compiler=ort-opt|ort-noopt|openvino-f32|openvino-native"
python3 "$here/make_curve.py" curve "$here" > "$here/curve.csv"
