"""The budget curve's two steps (measure.sh runs them).

cut SRC DST K: a MetaSchedule database with each task's first K records.
curve DIR: curve.csv from DIR/checks/*.json, the databases' tuning.json and
references.csv (ONNX Runtime and OpenVINO measured by `dlas run` beside it).
"""
import csv
import json
import os
import sys


def cut(src, dst, k):
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(src, "database_workload.json")) as f:
        workloads = f.read()
    with open(os.path.join(dst, "database_workload.json"), "w") as f:
        f.write(workloads)
    seen = {}
    with open(os.path.join(src, "database_tuning_record.json")) as f, \
            open(os.path.join(dst, "database_tuning_record.json"), "w") as out:
        for line in f:
            task = json.loads(line)[0]
            seen[task] = seen.get(task, 0) + 1
            if seen[task] <= k:
                out.write(line)


def curve(here):
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(["network", "compiler", "trials_per_task", "trials", "tasks",
                "median_ms", "runs", "vs_ort_opt", "tuning_wall_s"])
    refs = {}
    with open(os.path.join(here, "references.csv")) as f:
        for row in csv.DictReader(f):
            refs[(f"{row['dataset']}-{row['model']}", row["compiler"])] = row
    for net in ("cifar10-resnet18", "cifar10-mobilenetv2"):
        ort = float(refs[(net, "ort-opt")]["median_ms"])
        with open(os.path.join(here, f"{net}-gemm", "tuning.json")) as f:
            tuning = json.load(f)
        for k in ("untuned", 1, 2, 4, 8, 16):
            name = f"{net}-untuned" if k == "untuned" else f"{net}-k{k}"
            with open(os.path.join(here, "checks", f"{name}.json")) as f:
                c = json.load(f)
            tuned = k != "untuned"
            with open(os.path.join(here, f"{net}-gemm", "database_tuning_record.json")) as f:
                per = {}
                for line in f:
                    t = json.loads(line)[0]
                    per[t] = per.get(t, 0) + 1
            trials = sum(min(n, k) for n in per.values()) if tuned else 0
            w.writerow([net, "tvm" if tuned else "tvm (untuned)", k if tuned else 0, trials,
                        c["tasks"], f"{c['median_ms']:.3f}", c["runs"],
                        f"{c['median_ms'] / ort:.2f}",
                        f"{tuning['wall_s']:.0f}" if k == 16 else ""])
        for compiler in ("ort-opt", "ort-noopt", "openvino-f32", "openvino-native"):
            r = refs[(net, compiler)]
            w.writerow([net, compiler, "", "", "", f"{float(r['median_ms']):.3f}", r["runs"],
                        f"{float(r['median_ms']) / ort:.2f}", ""])


if __name__ == "__main__":
    if sys.argv[1] == "cut":
        cut(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        curve(sys.argv[2])
