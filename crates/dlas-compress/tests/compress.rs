//! End-to-end: compress CIFAR networks, export, run in tract, and check the reports.

// Helpers outside #[test] functions print too (clippy.toml lets only tests print).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use dlas_compress::{
    CalibrationMethod, Compressed, Footprint, Removal, Request, Tract, compress, footprint,
};
use dlas_core::{Compression, Dataset};
use dlas_zoo::weights::{self, Weights};
use dlas_zoo::{Graph, GraphBuilder, Op};

fn net(name: &str) -> (Graph, Weights) {
    let g = (dlas_zoo::find(Dataset::Cifar10, name).unwrap().build)();
    let w = weights::generate(&g, 1);
    (g, w)
}

fn run(g: &Graph, w: &Weights, request: &Request) -> Compressed {
    let c = compress(g, w, request, &Tract).unwrap();
    eprintln!("{}", serde_json::to_string(&Summary(&c)).unwrap());
    c
}

/// The report without the per-layer map, for the log.
struct Summary<'a>(&'a Compressed);
impl serde::Serialize for Summary<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut r = serde_json::to_value(&self.0.report).unwrap();
        r.as_object_mut().unwrap().remove("density");
        r.serialize(s)
    }
}

/// Runs the exported ONNX bytes in tract on the fidelity inputs.
fn runs_in_tract(c: &Compressed, dtype: dlas_onnx::Dtype) -> Vec<f32> {
    let [ch, h, w] = c.graph.input_shape();
    let x = weights::input(&c.graph, 3, 1);
    let out = dlas_onnx::run_bytes(&c.onnx().unwrap(), dtype, &[1, ch, h, w], &x).unwrap();
    assert_eq!(out[0].len(), c.graph.output().shape[0]);
    assert!(out[0].iter().all(|v| v.is_finite()));
    out.into_iter().next().unwrap()
}

#[test]
fn weight_pruning_report() {
    let (g, w) = net("resnet18");
    let c = run(&g, &w, &Request::new(Compression::WeightPruning, Some(0.8)));
    let r = &c.report;
    // Biases and batch norm are not pruned, so slightly under 5x.
    assert!(
        r.params_ratio > 4.5 && r.params_ratio < 5.0,
        "{}",
        r.params_ratio
    );
    // CSR doubles the bytes of every non-zero weight.
    assert!(
        r.bytes_ratio > 2.2 && r.bytes_ratio < 2.5,
        "{}",
        r.bytes_ratio
    );
    assert!(r.macs < r.macs_dense / 2);
    assert_eq!(r.density.len(), g.weighted_layers().count());
    assert!(r.fidelity.rel_l2 > 0.0 && r.fidelity.rel_l2 < 1.5);
    // A sweep's counts without fidelity are the report's.
    let counts = |params, bytes, macs| Footprint {
        params,
        bytes,
        macs,
    };
    assert_eq!(
        footprint(&g, &c.weights, Compression::WeightPruning).unwrap(),
        counts(r.params, r.bytes, r.macs)
    );
    assert_eq!(
        footprint(&g, &w, Compression::Dense).unwrap(),
        counts(r.params_dense, r.bytes_dense, r.macs_dense)
    );
    let err = footprint(&g, &w, Compression::Int8)
        .unwrap_err()
        .to_string();
    assert!(err.contains("int8 has no float32 footprint"), "{err}");
    runs_in_tract(&c, dlas_onnx::Dtype::F32);
}

#[test]
fn channel_pruning_reports_in_both_modes() {
    let (g, w) = net("resnet18");
    let zero = run(
        &g,
        &w,
        &Request::new(Compression::ChannelPruning, Some(0.5)),
    );
    let mut req = Request::new(Compression::ChannelPruning, Some(0.5));
    req.removal = Removal::Remove;
    let removed = run(&g, &w, &req);
    // The same channels go, so the same outputs and the same non-zero weights.
    assert_eq!(
        zero.report.fidelity.top1_agreement,
        removed.report.fidelity.top1_agreement
    );
    assert!((zero.report.fidelity.rel_l2 - removed.report.fidelity.rel_l2).abs() < 1e-4);
    assert_eq!(zero.report.macs, removed.report.macs);
    let pruned = zero.report.channels_pruned.unwrap();
    assert_eq!(Some(pruned), removed.report.channels_pruned);
    assert!(pruned > 0.3 && pruned < 0.6, "{pruned}");
    assert_eq!(removed.report.macs, removed.graph.macs());
    assert_eq!(removed.report.params, removed.graph.params());
    // Zeroed channels keep their (zeroed) batch-norm parameters in storage.
    assert!(zero.report.params >= removed.report.params);
    // Removed channels need no index: smaller in bytes than zeros in CSR.
    assert!(removed.report.bytes < zero.report.bytes);
    assert!(removed.report.density.values().all(|d| *d == 1.0));
    let counted = footprint(&g, &zero.weights, Compression::ChannelPruning).unwrap();
    assert_eq!(
        (counted.params, counted.bytes, counted.macs),
        (zero.report.params, zero.report.bytes, zero.report.macs)
    );
    runs_in_tract(&removed, dlas_onnx::Dtype::F32);
}

/// QDQ int8 runs in tract (as fake quantisation) and stays close to float:
/// relative L2 error of the logits under 10% and the same top-1 class on
/// at least 7 of 8 inputs.
#[test]
fn int8_qdq_runs_in_tract_close_to_float() {
    for (name, method) in [
        ("resnet18", CalibrationMethod::MinMax),
        (
            "mobilenetv2",
            CalibrationMethod::Percentile { percentile: 99.99 },
        ),
    ] {
        let (g, w) = net(name);
        let req = Request::new(Compression::Int8, None).seeded_calibration(&g, 9, 4, method);
        let c = run(&g, &w, &req);
        let r = &c.report;
        assert!(
            r.fidelity.rel_l2 < 0.1,
            "{name} {method:?}: {}",
            r.fidelity.rel_l2
        );
        assert!(r.fidelity.top1_agreement >= 7.0 / 8.0);
        assert!(
            r.bytes_ratio > 3.5 && r.bytes_ratio < 4.0,
            "{}",
            r.bytes_ratio
        );
        let params = c.int8.as_ref().unwrap();
        assert_eq!(params.layers.len(), g.weighted_layers().count());
        assert_eq!(params.layers[0].input, "input");
        let bytes = c.onnx().unwrap();
        let model = dlas_onnx::decode(&bytes).unwrap();
        let ops: Vec<&str> = model
            .graph
            .as_ref()
            .unwrap()
            .node
            .iter()
            .map(|n| n.op_type.as_str())
            .collect();
        assert!(ops.contains(&"QuantizeLinear") && ops.contains(&"DequantizeLinear"));
        runs_in_tract(&c, dlas_onnx::Dtype::F32);
    }
}

/// A small net with every operator family float16 has to express
/// (conv, batch norm, Relu6 clip, SiLU, linear as MatMul + Add).
fn tiny() -> (Graph, Weights) {
    let mut b = GraphBuilder::new("tiny", Dataset::Cifar10);
    let x = b.conv_bn(0, 8, 3, 2, 1, Some(Op::Relu6));
    let y = b.conv_bn(x, 8, 3, 1, 8, Some(Op::Silu));
    let x = b.add(x, y);
    let x = b.global_avg_pool(x);
    let x = b.flatten(x);
    b.linear(x, 10);
    let g = b.finish();
    let w = weights::generate(&g, 2);
    (g, w)
}

#[test]
fn fp16_onnx_runs_in_tract() {
    let (g, w) = tiny();
    let c = run(&g, &w, &Request::new(Compression::Fp16, None));
    assert!(
        c.report.fidelity.rel_l2 < 1e-2,
        "{}",
        c.report.fidelity.rel_l2
    );
    assert!((c.report.bytes_ratio - 2.0).abs() < 1e-9);
    let half = runs_in_tract(&c, dlas_onnx::Dtype::F16);
    let x = weights::input(&g, 3, 1);
    let float = dlas_onnx::run_bytes(
        &dlas_onnx::export(&g, &w),
        dlas_onnx::Dtype::F32,
        &[1, 3, 32, 32],
        &x,
    )
    .unwrap();
    for (a, b) in half.iter().zip(&float[0]) {
        assert!((a - b).abs() < 2e-2 * b.abs().max(1.0), "{a} vs {b}");
    }
}

#[test]
fn levels_are_checked_per_technique() {
    let (g, w) = tiny();
    let e = compress(
        &g,
        &w,
        &Request::new(Compression::WeightPruning, Some(1.2)),
        &Tract,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("1.2") && e.to_string().contains("[0, 1)"),
        "{e}"
    );
    let e = compress(
        &g,
        &w,
        &Request::new(Compression::ChannelPruning, None),
        &Tract,
    )
    .unwrap_err();
    assert!(e.to_string().contains("needs a level"), "{e}");
    let e = compress(&g, &w, &Request::new(Compression::Fp16, Some(0.5)), &Tract).unwrap_err();
    assert!(e.to_string().contains("takes no level"), "{e}");
    let e = compress(&g, &w, &Request::new(Compression::Int8, None), &Tract).unwrap_err();
    assert!(e.to_string().contains("calibration"), "{e}");
}

#[test]
fn dense_is_identity() {
    let (g, w) = tiny();
    let c = run(&g, &w, &Request::new(Compression::Dense, None));
    let r = &c.report;
    assert_eq!(
        (r.params, r.bytes, r.macs),
        (r.params_dense, r.bytes_dense, r.macs_dense)
    );
    assert_eq!(r.fidelity.snr_db, None);
    assert_eq!(r.params, g.params());
    assert_eq!(r.macs, g.macs());
}
