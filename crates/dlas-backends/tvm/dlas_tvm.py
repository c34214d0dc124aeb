"""dlas_tvm: Apache TVM 0.27 (Relax + MetaSchedule) as a measured compiler for dlas.

Why this file exists: TVM's compiler (ONNX import, Relax passes, MetaSchedule tuning) is
only reachable from Python, so the Rust side of dlas runs this script as a subprocess
(`python dlas_tvm.py ...`, or its text through `python -c`; nothing here uses __file__)
with the interpreter of a venv built from requirements.txt next to it.  It compiles one
ONNX model with one hand-written convolution algorithm, optionally tunes it with
MetaSchedule, and serves inference over a small binary protocol, so that the timing loop
and statistics stay in Rust while the time of each run is taken in Python, next to the
VM call.

Subcommands (every one writes exactly one JSON line to stdout; all other output of
Python, TVM and its worker processes is routed to stderr; an error is written to stderr
as {"error": "..."} and exits 1):

  tune   --model M.onnx --input-shape 1,3,32,32 --algorithm A --trials N --work-dir DIR
         --threads T [--seed S]
         [--population P] [--build-timeout S] [--run-timeout S]
         -> {"tasks","trials","budget","trials_per_task","records","valid_records",
             "tuned_tasks","resumed_tasks","wall_s","tvm","target","algorithm","seed",
             "population"}
         DIR receives MetaSchedule's database_workload.json, database_tuning_record.json
         and logs/.  Tuning into a DIR that holds records resumes it: tasks with the
         budget's candidates measured there already are not tuned again (resumed_tasks
         counts them), and the records must be this CPU's.
  serve  --model M.onnx --input-shape ... --algorithm A --database DIR|none --threads T
         [--foreign]
         -> {"ready":true,"tvm","target","tuned_on","build_s","tasks","tuned_tasks","threads"},
         (a database tuned on another CPU than this one is refused unless --foreign;
         tuned_on lists the CPUs its records were measured on)
         then the binary protocol on stdin/stdout:
           'I' u64le n, n bytes of f32le : set the input (shape from --input-shape)
           'R'                          : run once; reply u64le ns, u64le n, n bytes f32le
           'Q' (or end of input)        : exit 0
         The ns value is time.perf_counter_ns() around the VM call plus the conversion
         of its output to a numpy array (zero-copy np.from_dlpack; CPU kernels are
         synchronous, so no work is left pending).  The wire format is always f32,
         also for float16 models (converted on both sides, outside the timed region).
         A model with several outputs replies with its first output.
  cpu    -> {"mcpu"}: this CPU as LLVM names it, the `mcpu` tuning records carry
  check  --model M.onnx --input-shape ... --algorithm A [--database DIR] [--threads T]
         [--seed S] [--runs K] [--save-npy OUT.npy]
         -> the build info, output shape, first values, median run time; the input is
            numpy.random.default_rng(seed).standard_normal(shape) as float32.

Algorithms (every static-shape NCHW/OIHW, groups=1 relax.nn.conv2d is legalized to a
hand-written TE compute; TOPI has no im2col or spatial-pack compute any more):
  direct        plain NCHW loop nest over (n, k, y, x; c, r, s)
  gemm          im2col matrix [n, c*r*s, oh*ow] times the [k, c*r*s] kernel matrix
  spatial-pack  output tiled in VC x VH x VW blocks, input packed per block with its halo,
                kernel packed as [k/VC, c, r, s, VC] in a separate kernel that
                FoldConstant runs at compile time (as TVM's old x86/arm spatial pack did)
Grouped and depthwise convolutions (groups > 1), other layouts and dynamic shapes keep
TVM's default (TOPI) legalization under every algorithm.  The packing stages (im2col,
data_vec) carry "meta_schedule.inline_rule": "disable", so MetaSchedule cannot inline
them away and the algorithms stay distinct.
"""

import argparse
import json
import os
import struct
import sys
import time

ALGORITHMS = ("direct", "gemm", "spatial-pack")
# Tasks tuned per call of MetaSchedule's tune_tasks: what an interruption can lose
# (about 15 s of tuning a task on 2 cores at the study's budget).
TASKS_PER_CHUNK = 8
NO_INLINE = {"meta_schedule.inline_rule": "disable"}
_OUT = None  # the real stdout (binary), claimed by _claim_stdout()


def _claim_stdout():
    """Keep fd 1 for our JSON/protocol; send every other print (C++ too) to stderr."""
    global _OUT
    sys.stdout.flush()
    _OUT = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr


def _fail(message):
    sys.stderr.write(json.dumps({"error": message}) + "\n")
    sys.stderr.flush()
    os._exit(1)  # also skips waiting for MetaSchedule's worker processes


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors follow the same JSON convention
        _fail(f"usage: {message}")


def _emit(obj):
    _OUT.write((json.dumps(obj) + "\n").encode())
    _OUT.flush()


def _light_tensor_intrin():
    """Register only the tensor intrinsics of the host CPU (the target is always it).

    MetaSchedule's TuneContext and default builder `import tvm.s_tir.tensor_intrin`,
    which registers the CUDA, ROCm, Hexagon, ARM, RISC-V and x86 intrinsics by parsing
    TVMScript: 23-32 s on 2 cores (CUDA alone 17 s, x86 0.5 s).  Pre-seeding the package
    lets later imports of it (and of its submodules) succeed.  Unknown hosts: full import.
    """
    import importlib
    import platform
    import types

    import tvm.s_tir

    name = "tvm.s_tir.tensor_intrin"
    sub = {"x86_64": "x86", "amd64": "x86", "aarch64": "arm_cpu", "arm64": "arm_cpu",
           "riscv64": "riscv_cpu"}.get(platform.machine().lower())
    if sub is None:
        importlib.import_module(name)
        return
    if name not in sys.modules:
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin")]
        sys.modules[name] = pkg
        tvm.s_tir.tensor_intrin = pkg
    importlib.import_module(f"{name}.{sub}")


def _ms_build(mod, target, _params):
    """MetaSchedule build function: the default one minus its tensor-intrinsic import.

    Each build batch starts fresh worker processes; the default build function imports
    tvm.s_tir.tensor_intrin in each of them (13.6 s idle, > 30 s under load), so with the
    default 30 s timeout every candidate became a "build error" and tuning silently
    produced nothing.  Intrinsics are only needed while scheduling (main process), not
    to compile an already tensorized module.
    """
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.driver.build(mod, target=target)


# --------------------------------------------------------------------------- model


def _load(args):
    """Import the ONNX model into Relax; return (mod, input dtype, TVM target)."""
    import onnx
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    model = onnx.load(args.model)
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise ValueError(f"expected one graph input, found {[i.name for i in inputs]}")
    name = inputs[0].name
    dtype = str(onnx.helper.tensor_dtype_to_np_dtype(inputs[0].type.tensor_type.elem_type))
    mod = from_onnx(model, shape_dict={name: list(args.input_shape)}, dtype_dict={name: dtype})
    target = tvm.target.Target({
        "kind": "llvm",
        "mcpu": tvm.target.codegen.llvm_get_system_cpu(),
        "num-cores": args.threads,
    })
    return mod, dtype, target


def _conv2d_legalizer(algorithm):
    """Return the relax.nn.conv2d legalization function for `algorithm`."""
    import tvm
    from tvm import te, topi

    default = tvm.ir.Op.get("relax.nn.conv2d").get_attr("FLegalize")  # TOPI's

    def largest_divisor(n, candidates):
        return next(c for c in candidates if n % c == 0)

    def legalize(bb, call):
        a = call.attrs
        data, kernel = call.args
        try:
            N, C, H, W = (int(v) for v in data.ty.shape)
            K, CK, R, S = (int(v) for v in kernel.ty.shape)
        except (TypeError, ValueError, AttributeError):  # symbolic or unknown shape
            return default(bb, call)
        if (int(a.groups) != 1 or CK != C or a.data_layout != "NCHW"
                or a.kernel_layout != "OIHW" or a.out_layout != "NCHW"):
            return default(bb, call)  # grouped/depthwise or other layouts: TOPI, all algorithms
        sh, sw = (int(v) for v in a.strides)
        dh, dw = (int(v) for v in a.dilation)
        pt, pl, pb, pr = (int(v) for v in a.padding)
        od = str(a.out_dtype) if a.out_dtype is not None else ""
        if od in ("", "void", "None"):
            od = str(data.ty.dtype)
        OH = (H + pt + pb - (R - 1) * dh - 1) // sh + 1
        OW = (W + pl + pr - (S - 1) * dw - 1) // sw + 1

        def pad(x):
            if pt or pl or pb or pr:
                return topi.nn.pad(x, [0, 0, pt, pl], [0, 0, pb, pr], name="pad")
            return x

        def direct(x, w):
            xp = pad(x)
            c = te.reduce_axis((0, C), "c")
            r = te.reduce_axis((0, R), "r")
            s = te.reduce_axis((0, S), "s")
            return te.compute(
                (N, K, OH, OW),
                lambda n, k, y, z: te.sum(
                    xp[n, c, y * sh + r * dh, z * sw + s * dw].astype(od) * w[k, c, r, s].astype(od),
                    axis=[c, r, s]),
                name="conv2d_direct")

        def gemm(x, w):
            xp = pad(x)
            RS, CRS = R * S, C * R * S
            cols = te.compute(
                (N, CRS, OH * OW),
                lambda n, q, p: xp[n, q // RS, (p // OW) * sh + (q % RS) // S * dh,
                                   (p % OW) * sw + (q % S) * dw],
                name="im2col", attrs=NO_INLINE)
            wm = te.compute((K, CRS), lambda k, q: w[k, q // RS, (q % RS) // S, q % S], name="kmat")
            q = te.reduce_axis((0, CRS), "q")
            prod = te.compute(
                (N, K, OH * OW),
                lambda n, k, p: te.sum(wm[k, q].astype(od) * cols[n, q, p].astype(od), axis=q),
                name="conv2d_gemm")
            return te.compute((N, K, OH, OW), lambda n, k, y, z: prod[n, k, y * OW + z], name="col2im")

        # spatial pack: tile sizes are the largest candidates that divide the extents
        VC = largest_divisor(K, (8, 4, 2, 1))
        VH = largest_divisor(OH, (2, 1))
        VW = largest_divisor(OW, (8, 4, 2, 1))

        def pack_kernel(w):
            return te.compute((K // VC, C, R, S, VC),
                              lambda co, c, r, s, vc: w[co * VC + vc, c, r, s], name="kernel_vec")

        def spatial_pack(x, kv):
            xp = pad(x)
            HB, WB = (VH - 1) * sh + (R - 1) * dh + 1, (VW - 1) * sw + (S - 1) * dw + 1
            dvec = te.compute(
                (N, OH // VH, OW // VW, C, HB, WB),
                lambda n, h, g, c, vh, vw: xp[n, c, h * VH * sh + vh, g * VW * sw + vw],
                name="data_vec", attrs=NO_INLINE)
            c = te.reduce_axis((0, C), "c")
            r = te.reduce_axis((0, R), "r")
            s = te.reduce_axis((0, S), "s")
            conv = te.compute(
                (N, K // VC, OH // VH, OW // VW, VH, VW, VC),
                lambda n, co, h, g, vh, vw, vc: te.sum(
                    dvec[n, h, g, c, vh * sh + r * dh, vw * sw + s * dw].astype(od)
                    * kv[co, c, r, s, vc].astype(od), axis=[c, r, s]),
                name="conv2d_spatial_pack")
            return te.compute(
                (N, K, OH, OW),
                lambda n, k, y, z: conv[n, k // VC, y // VH, z // VW, y % VH, z % VW, k % VC],
                name="unpack")

        if algorithm == "direct":
            return bb.call_te(direct, data, kernel, primfunc_name_hint="conv2d_direct")
        if algorithm == "gemm":
            return bb.call_te(gemm, data, kernel, primfunc_name_hint="conv2d_gemm")
        kv = bb.emit(bb.call_te(pack_kernel, kernel, primfunc_name_hint="kernel_pack"))
        return bb.call_te(spatial_pack, data, kv, primfunc_name_hint="conv2d_spatial_pack")

    return legalize


def _legalize(mod, algorithm):
    """Inference rewrites, then conv2d -> our TE compute; other ops stay for zero_pipeline."""
    import tvm
    from tvm import relax

    return tvm.transform.Sequential([
        relax.transform.DecomposeOpsForInference(),
        relax.transform.CanonicalizeBindings(),
        relax.transform.LegalizeOps(
            customize_legalize_map={"relax.nn.conv2d": _conv2d_legalizer(algorithm)}),
    ])(mod)


def _count_kernels(mod):
    """(number of PrimFuncs, number of them that carry a MetaSchedule schedule)."""
    import tvm

    funcs = [f for _, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    tuned = sum(1 for f in funcs if f.attrs is not None and bool(f.attrs.get("tirx.is_scheduled", False)))
    return len(funcs), tuned


def database_cpus(records):
    """The CPUs (`mcpu` of the target) the records of a database were measured on."""
    cpus = set()
    with open(records) as f:
        for line in f:
            if line.strip():
                cpus.add(json.loads(line)[1][2].get("mcpu", "unknown"))
    return sorted(cpus)


def _check_database_cpu(records, here, foreign):
    """Refuse another CPU's database unless `foreign`.

    Why: TVM 0.27 looks a record up by its workload and target *kind*, not by `mcpu`, so
    a database tuned on a Zen 4 schedules a Xeon's build without a word (measured); the
    row would then be another machine's tuning under this machine's name.
    """
    theirs = database_cpus(records)
    if here in theirs:
        return
    if foreign and len(theirs) == 1:
        return
    raise ValueError(
        f"{records} holds schedules tuned on {', '.join(theirs) or 'no CPU'} but this CPU is "
        f"{here}: tune it here with `dlas tune`, or pass --foreign-tuning to apply another "
        "CPU's schedules (one CPU only)")


def _build(args, mod, target):
    """Compile for the VM; return (executable, kernels, tuned kernels).

    database none = "untuned": in TVM 0.27 that means *no schedule at all*: every
    PrimFunc is compiled as TE wrote it (serial loops, one thread, no tiling; LLVM may
    still vectorize innermost loops).  There is no built-in CPU fallback schedule any
    more (no Relay op strategies, no topi.x86 schedules, no Ansor/AutoTVM).
    With a database, the static_shape_tuning pipeline with total_trials=0 applies the
    best record of each task (MetaScheduleApplyDatabase); tasks with no matching record
    fall back to the same unscheduled code.
    """
    import tvm
    from tvm import relax

    mod = _legalize(mod, args.algorithm)
    if args.database in (None, "none"):
        with target:
            mod = relax.get_pipeline("zero")(mod)
    else:
        records = os.path.join(args.database, "database_tuning_record.json")
        if not os.path.isfile(records):
            raise FileNotFoundError(f"no MetaSchedule database in {args.database}")
        _check_database_cpu(records, str(target.attrs["mcpu"]), args.foreign)
        mod = relax.get_pipeline("static_shape_tuning", total_trials=0, target=target,
                                 work_dir=args.database)(mod)
    kernels, tuned = _count_kernels(mod)
    return tvm.compile(mod, target), kernels, tuned


# --------------------------------------------------------------------------- subcommands


def cmd_tune(args):
    import random

    import numpy as np
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig
    from tvm.s_tir.meta_schedule.relax_integration import extracted_tasks_to_tune_contexts
    from tvm.s_tir.meta_schedule.tune import tune_tasks
    from tvm_ffi import structural_hash

    random.seed(args.seed)
    np.random.seed(args.seed)
    t0 = time.perf_counter()
    mod, _, target = _load(args)
    _light_tensor_intrin()
    with target:
        mod = relax.get_pipeline("zero")(_legalize(mod, args.algorithm))
    tasks = ms.relax_integration.extract_tasks(mod, target)
    # An even split of the budget: with the default (per task = global budget, 64 per
    # iteration) the first tasks can use it all and later ones get no trial at all.
    if args.trials_per_task is not None:
        per_task = max(1, args.trials_per_task)
        total = per_task * len(tasks)
    else:
        per_task = max(1, -(-args.trials // max(1, len(tasks))))
        total = args.trials
    os.makedirs(args.work_dir, exist_ok=True)
    for name in ("database_workload.json", "database_tuning_record.json"):
        _drop_partial_line(os.path.join(args.work_dir, name))
    records_path = os.path.join(args.work_dir, "database_tuning_record.json")
    before = _count_lines(records_path)
    measured = _measured_per_task(args.work_dir, records_path,
                                  str(target.attrs["mcpu"])) if before else {}
    # One context per task, made for all of them before any is left out, so that a
    # task's random state (forked from the seed by its position) is the same in a
    # resumed tuning as in one that ran straight through.
    contexts, weights = extracted_tasks_to_tune_contexts(
        extracted_tasks=tasks, work_dir=args.work_dir, space="post-order-apply",
        strategy=ms.search_strategy.EvolutionarySearch(population_size=args.population),
        seed=args.seed)  # seeds the per-task random states (search and mutation)
    left = [(c, w) for c, w in zip(contexts, weights)
            if measured.get(structural_hash(c.mod), 0) < per_task]
    budget_left = total - per_task * (len(contexts) - len(left))
    # Tuned a few tasks at a time: MetaSchedule's task scheduler commits a task's
    # candidates to the database only when it comes back to the task after the round
    # over all tasks (measured: an empty database_tuning_record.json after 56 of 62
    # tasks), so in one call an interruption would lose every candidate.  Each chunk
    # gets a cost model of its own, untrained, as every task of one call's first round
    # has at this budget (one round of trials per task).  The search is not
    # reproducible either way: two runs of one tuning of ResNet-18 CIFAR-10 with the
    # same seed (2 trials a task, 18 tasks) had 1 of 35 candidates in common, as had a
    # run in chunks of 3 with either; hence the committed databases.
    for i in range(0, len(left), TASKS_PER_CHUNK):
        chunk = left[i:i + TASKS_PER_CHUNK]
        trials = min(per_task * len(chunk), budget_left)
        if trials <= 0:
            break
        budget_left -= trials
        tune_tasks(
            tasks=[c for c, _ in chunk], task_weights=[w for _, w in chunk],
            work_dir=args.work_dir, max_trials_global=trials,
            max_trials_per_task=per_task, num_trials_per_iter=min(64, per_task),
            builder=ms.builder.LocalBuilder(f_build=_ms_build, timeout_sec=args.build_timeout),
            runner=ms.runner.LocalRunner(timeout_sec=args.run_timeout),
            database="json",
            cost_model=ms.cost_model.XGBModel(config=XGBConfig(seed=args.seed)),
            measure_callbacks="default", task_scheduler="gradient",
            module_equality="structural")
    db = ms.database.JSONDatabase(work_dir=args.work_dir)
    records = db.get_all_tuning_records()
    valid = [r for r in records if r.run_secs and all(float(s) < 1e9 for s in r.run_secs)]
    tuned = {structural_hash(r.workload.mod) for r in valid}
    # trials: records this run added to DIR (one per measured candidate); records,
    # valid_records (finite run time) and tuned_tasks describe the whole database in DIR.
    _emit({"tasks": len(tasks), "trials": len(records) - before, "budget": total,
           "resumed_tasks": len(contexts) - len(left),
           "trials_per_task": per_task, "records": len(records),
           "valid_records": len(valid), "tuned_tasks": len(tuned),
           "wall_s": round(time.perf_counter() - t0, 3), "tvm": tvm.__version__,
           "target": str(target), "algorithm": args.algorithm, "seed": args.seed,
           "population": args.population})


def _measured_per_task(work_dir, records, here):
    """Candidates already measured per task (by the structural hash of its workload) in
    the database of an interrupted tuning in work_dir, which this one resumes.

    Why: a network of 176 tasks tunes for about 45 minutes per algorithm on 2 cores; an
    interruption should cost the task in flight, not the tasks already measured.  Only
    the CPU that measured them may resume (their times are that CPU's).
    """
    from tvm.s_tir import meta_schedule as ms
    from tvm_ffi import structural_hash

    theirs = database_cpus(records)
    if theirs != [here]:
        raise ValueError(
            f"{work_dir} is an unfinished tuning measured on {', '.join(theirs)}, but this "
            f"CPU is {here}: remove {work_dir} to start it over here")
    counts = {}
    for r in ms.database.JSONDatabase(work_dir=work_dir).get_all_tuning_records():
        h = structural_hash(r.workload.mod)
        counts[h] = counts.get(h, 0) + 1
    return counts


def _drop_partial_line(path):
    """Cut a last line that a kill left half-written (MetaSchedule appends a record per
    line), which its JSON reader would refuse; every whole line is kept."""
    if not os.path.isfile(path):
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)
            print(f"{path}: dropped its half-written last line", file=sys.stderr)


def _count_lines(path):
    if not os.path.isfile(path):
        return 0
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def _prepare(args):
    import tvm
    from tvm import relax

    t0 = time.perf_counter()
    mod, dtype, target = _load(args)
    ex, kernels, tuned = _build(args, mod, target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    tuned_on = ([] if args.database in (None, "none") else
                database_cpus(os.path.join(args.database, "database_tuning_record.json")))
    info = {"tvm": tvm.__version__, "target": str(target), "tuned_on": tuned_on,
            "build_s": round(time.perf_counter() - t0, 3), "tasks": kernels,
            "tuned_tasks": tuned, "fallback_tasks": kernels - tuned,
            "threads": int(tvm.get_global_func("runtime.NumThreads")()), "dtype": dtype}
    return vm["main"], dtype, info


def _as_numpy(res):
    """First output of a VM call as a numpy array.

    The VM returns a tensor, or a tuple for several outputs (the first is taken).
    np.from_dlpack wraps the tensor without a copy (0.4 us against 9 us for
    Tensor.numpy() on a 1 KiB output); CPU kernels run synchronously, so by then all
    work is done.  Tensor.numpy() remains the fallback for dtypes DLPack can't export.
    """
    import numpy as np

    t = res if hasattr(res, "numpy") else res[0]
    try:
        return np.from_dlpack(t)
    except (TypeError, RuntimeError, BufferError):
        return t.numpy()


def cmd_serve(args):
    import numpy as np
    import tvm

    run, dtype, info = _prepare(args)
    _emit({"ready": True, **info})
    dev = tvm.cpu()
    shape = tuple(args.input_shape)
    need = 4 * int(np.prod(shape))
    rd, out, perf = sys.stdin.buffer, _OUT, time.perf_counter_ns
    inp = None
    while True:
        op = rd.read(1)
        if op in (b"", b"Q"):
            return
        if op == b"I":
            (n,) = struct.unpack("<Q", _read_exact(rd, 8))
            if n != need:
                raise ValueError(f"input has {n} bytes, shape {shape} needs {need}")
            x = np.frombuffer(_read_exact(rd, n), dtype="<f4").reshape(shape)
            inp = tvm.runtime.tensor(x.astype(dtype), dev)
        elif op == b"R":
            if inp is None:
                raise ValueError("'R' before any 'I'")
            t0 = perf()
            y = _as_numpy(run(inp))
            t1 = perf()
            b = y.astype("<f4", copy=False).tobytes()
            out.write(struct.pack("<QQ", t1 - t0, len(b)) + b)
            out.flush()
        else:
            raise ValueError(f"unknown opcode {op!r}")


def _read_exact(rd, n):
    b = rd.read(n)
    if len(b) != n:
        raise EOFError(f"stdin closed after {len(b)} of {n} bytes")
    return b


def cmd_check(args):
    import numpy as np
    import tvm

    run, dtype, info = _prepare(args)
    x = np.random.default_rng(args.seed).standard_normal(args.input_shape).astype(np.float32)
    inp = tvm.runtime.tensor(x.astype(dtype), tvm.cpu())
    y = _as_numpy(run(inp)).astype(np.float32)
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter_ns()
        _as_numpy(run(inp))
        times.append(time.perf_counter_ns() - t0)
    if args.save_npy:
        np.save(args.save_npy, y)
    _emit({**info, "algorithm": args.algorithm, "output_shape": list(y.shape),
           "first": [round(float(v), 6) for v in y.ravel()[:8]],
           "l2": float(np.linalg.norm(y)), "finite": bool(np.isfinite(y).all()),
           "runs": args.runs, "median_ms": float(np.median(times)) / 1e6 if times else None})


def cmd_cpu(_args):
    import tvm

    _emit({"mcpu": tvm.target.codegen.llvm_get_system_cpu()})


def main(argv=None):
    p = _Parser(prog="dlas_tvm", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("cpu")
    for name in ("tune", "serve", "check"):
        s = sub.add_parser(name)
        s.add_argument("--model", required=True)
        s.add_argument("--input-shape", required=True,
                       type=lambda v: tuple(int(d) for d in v.split(",")))
        s.add_argument("--algorithm", required=True, choices=ALGORITHMS)
        s.add_argument("--threads", type=int, default=1)
        s.add_argument("--seed", type=int, default=0)
        if name == "tune":
            budget = s.add_mutually_exclusive_group(required=True)
            budget.add_argument("--trials", type=int,
                                help="candidates for the whole network, split evenly over its tasks")
            budget.add_argument("--trials-per-task", type=int,
                                help="candidates per task (the whole budget: this times the tasks)")
            s.add_argument("--work-dir", required=True)
            s.add_argument("--build-timeout", type=float, default=600.0)
            s.add_argument("--run-timeout", type=float, default=120.0)
            s.add_argument("--population", type=int, default=512,
                           help="evolutionary search population (MetaSchedule default 512)")
        else:
            s.add_argument("--database", default="none" if name == "check" else None,
                           required=name == "serve", help="MetaSchedule work dir, or none")
            s.add_argument("--foreign", action="store_true",
                           help="apply a database tuned on another CPU (one CPU only)")
        if name == "check":
            s.add_argument("--runs", type=int, default=0)
            s.add_argument("--save-npy")
    args = p.parse_args(argv)
    _claim_stdout()
    # Read by TVM's thread pool when it starts (also in tuning workers): set before import.
    os.environ["TVM_NUM_THREADS"] = str(getattr(args, "threads", 1))
    try:
        {"tune": cmd_tune, "serve": cmd_serve, "check": cmd_check, "cpu": cmd_cpu}[args.cmd](args)
    except BaseException as e:  # noqa: BLE001 - report every failure the same way
        if isinstance(e, SystemExit) and not e.code:
            raise
        _fail(f"{type(e).__name__}: {e}")
    _OUT.flush()


if __name__ == "__main__":
    main()
