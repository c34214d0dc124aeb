//! One kernel decision for the engine, the device model and the
//! calibration (issue 42): every convolution and linear layer of every zoo
//! network, under every configuration of algorithm, weight format, layout
//! and data type, is
//! - refused by the engine exactly when the device model refuses it;
//! - otherwise built by the engine as the kernel class its key names (read
//!   back from the built kernel, not from the key);
//! - priced by the model with that class (and a curve of a class the
//!   calibration times, the class itself or its stand-in);
//! - and timed by the calibration with a configuration under which the
//!   engine runs that same class on that layer.
//!
//! Each crate asks `dlas_core::kernel::kernel_class`; this test fails if
//! any of them decides on its own again (the engine's int8 path picking
//! its kernel, the model mapping algorithms to curves, the calibration's
//! grid configuring a class the engine does not run).

use dlas_core::{Algorithm, Combination, Compression, Format, KernelClass, Layout};
use dlas_devices::efficiency::stand_ins;
use dlas_devices::mock::{class_for, precision_of, shape_of};
use dlas_devices::{KernelKind, Workload as ModelWorkload};
use dlas_engine::{
    Activation, Conv2d, DType, EngineConfig, FormatChoice, Int8Scales, KernelAlgorithm, LayerKey,
    workload_of,
};
use dlas_runner::calibrate::layers::{config_for, setups};
use dlas_zoo::quant::ActivationQuant;
use dlas_zoo::{Graph, Op};
use std::collections::{BTreeSet, HashSet};

/// Every configuration of the backend axes the engine has a value for.
fn configurations() -> Vec<(Algorithm, Format, Layout, Compression)> {
    let mut out = Vec::new();
    for algorithm in [
        Algorithm::Direct,
        Algorithm::Gemm,
        Algorithm::SpatialPack,
        Algorithm::Winograd,
    ] {
        for format in [Format::Dense, Format::Csr, Format::Bsr] {
            for &layout in Layout::ALL {
                for compression in [Compression::Dense, Compression::Fp16, Compression::Int8] {
                    out.push((algorithm, format, layout, compression));
                }
            }
        }
    }
    out
}

fn engine_config(
    algorithm: Algorithm,
    format: Format,
    layout: Layout,
    compression: Compression,
) -> EngineConfig {
    EngineConfig {
        threads: 1,
        algorithm: KernelAlgorithm::try_from(algorithm).unwrap(),
        format: match format {
            Format::Dense => FormatChoice::Dense,
            Format::Csr => FormatChoice::Csr,
            Format::Bsr => FormatChoice::Bsr { rows: 1, cols: 4 },
        },
        layout,
        dtype: match compression {
            Compression::Fp16 => DType::F16,
            Compression::Int8 => DType::I8,
            _ => DType::F32,
        },
        schedule: None,
        quant: None,
    }
}

fn combination(
    network: &dlas_zoo::Network,
    (algorithm, format, layout, compression): (Algorithm, Format, Layout, Compression),
) -> Combination {
    Combination {
        dataset: network.dataset,
        model: network.name.into(),
        compression,
        level: 0.0,
        algorithm,
        format,
        layout,
        compiler: dlas_core::NATIVE.into(),
        tuned: false,
        device: "host".into(),
        batch: 1,
    }
}

/// Seeded-looking weights with zeros in them, so sparse formats store
/// something and skip something.
fn weights(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            if i % 3 == 0 {
                0.0
            } else {
                ((i % 7) as f32 - 3.0) * 0.1
            }
        })
        .collect()
}

/// The kernel the engine builds for `key` with `weights`.
fn built(key: LayerKey, weights: &[f32]) -> KernelClass {
    let w = key.workload;
    let conv = if key.dtype == DType::I8 {
        let quant = ActivationQuant {
            scale: 0.05,
            zero_point: 3,
        };
        let scales = Int8Scales {
            weights: &vec![0.01; w.out_channels],
            input: quant,
            output: quant,
        };
        Conv2d::new_int8(key, weights, None, Activation::Relu, scales)
    } else {
        Conv2d::new(
            key,
            key.default_schedule(1),
            weights,
            None,
            Activation::Relu,
        )
    };
    conv.unwrap_or_else(|e| panic!("{key}: {e:#}"))
        .kernel_class()
}

/// The convolution and linear nodes of `graph`, by name, with the
/// engine's shape of each.
fn layers(graph: &Graph) -> Vec<(String, dlas_engine::Workload)> {
    graph
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| matches!(n.op, Op::Conv(_) | Op::Linear { .. }))
        .map(|(id, n)| (n.name.clone(), workload_of(graph, id).unwrap()))
        .collect()
}

#[test]
fn engine_model_and_calibration_share_every_layers_kernel_class() {
    let cpu = dlas_engine::lowering::cpu();
    let timed: BTreeSet<KernelClass> = setups(cpu).iter().map(|s| s.class).collect();
    let mut seen = HashSet::new();
    let (mut checked, mut stood_in, mut refused) = (0, 0, 0);
    for network in dlas_zoo::all() {
        let graph = (network.build)();
        let model_kernels =
            ModelWorkload::new(&graph, &combination(network, configurations()[0]), None).kernels;
        for (name, w) in layers(&graph) {
            let kernel = model_kernels
                .iter()
                .find(|k| k.name == name)
                .unwrap_or_else(|| panic!("{}: the model has no kernel {name}", network.name));
            assert!(matches!(
                kernel.kind,
                KernelKind::Conv(_) | KernelKind::Linear
            ));
            let model_shape = shape_of(kernel).unwrap();
            // Layers of the same shapes decide alike; each pair once.
            if !seen.insert((w, model_shape)) {
                continue;
            }
            let wt = weights(w.out_channels * w.reduction());
            for config in configurations() {
                let (algorithm, format, layout, compression) = config;
                let engine = LayerKey::of(
                    w,
                    &wt,
                    &engine_config(algorithm, format, layout, compression),
                );
                let c = combination(network, config);
                let model = class_for(&c, &model_shape, precision_of(compression), cpu);
                let what = format!("{} {name} ({w}) under {config:?}", network.name);
                let key = match (engine, model) {
                    (Err(_), Err(_)) => {
                        refused += 1;
                        continue;
                    }
                    (Ok(key), Ok(model)) => {
                        assert_eq!(key.class, model, "{what}: engine's key and model differ");
                        key
                    }
                    (engine, model) => {
                        panic!("{what}: engine {engine:?}, model {model:?}: one refuses alone")
                    }
                };
                assert_eq!(built(key, &wt), key.class, "{what}: built kernel differs");
                // The calibration times the class, or the class whose
                // curve stands in for it (`Efficiency::cost`).
                let curve = stand_ins(key.class)
                    .into_iter()
                    .find(|k| timed.contains(k))
                    .unwrap_or_else(|| panic!("{what}: no calibrated curve for {}", key.class));
                if curve != key.class {
                    // Timed on its own grid (the calibration's `time`
                    // checks that the engine builds it there).
                    stood_in += 1;
                    continue;
                }
                // With a configuration under which the engine runs this
                // layer as that class too.
                let calibration = LayerKey::of(w, &wt, &config_for(&curve, 1))
                    .unwrap_or_else(|e| panic!("{what}: calibration config refused: {e}"));
                assert_eq!(
                    calibration.class, curve,
                    "{what}: calibration runs another class"
                );
                checked += 1;
            }
        }
    }
    dlas_core::outln!("{checked} checked, {stood_in} priced by a stand-in, {refused} refused");
    assert!(
        checked > 1000 && refused > 100,
        "{checked} checked, {refused} refused"
    );
}

/// A key read back from a tuning record decides the same class again.
#[test]
fn a_keys_record_reads_back_with_its_class() {
    let graph = (dlas_zoo::find(dlas_core::Dataset::Imagenet, "mobilenetv2")
        .unwrap()
        .build)();
    for (_, w) in layers(&graph) {
        let wt = weights(w.out_channels * w.reduction());
        for (algorithm, format, layout, compression) in configurations() {
            let config = engine_config(algorithm, format, layout, compression);
            if let Ok(key) = LayerKey::of(w, &wt, &config) {
                let text = serde_json::to_string(&key).unwrap();
                assert!(!text.contains("class"), "{text}");
                assert_eq!(serde_json::from_str::<LayerKey>(&text).unwrap(), key);
            }
        }
    }
}
