//! Properties the mocked devices' model must have whatever its parameters:
//! they follow from the equations, so a violation is a bug in the model.

use dlas_core::{Algorithm, Combination, Compression, Format, Layout};
use dlas_devices::{DeviceSpec, MockDevice, Workload, load_specs};
use std::path::Path;

fn specs() -> Vec<DeviceSpec> {
    load_specs(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/devices")).unwrap()
}

/// Every (network of the zoo, compression, algorithm, format), untuned,
/// that `spec` can predict.
fn combinations(spec: &DeviceSpec) -> Vec<Combination> {
    let device = spec.id.as_str();
    let mut out = Vec::new();
    for net in dlas_zoo::all() {
        for compression in Compression::ALL {
            for algorithm in [
                Algorithm::Direct,
                Algorithm::Gemm,
                Algorithm::SpatialPack,
                Algorithm::Winograd,
            ] {
                let format = if compression.is_pruning() {
                    Format::Csr
                } else {
                    Format::Dense
                };
                out.push(Combination {
                    dataset: net.dataset,
                    model: net.name.into(),
                    compression: *compression,
                    level: if compression.is_pruning() { 0.5 } else { 0.0 },
                    algorithm,
                    format,
                    layout: Layout::Nchw,
                    compiler: "native".into(),
                    tuned: false,
                    device: device.into(),
                    batch: 1,
                });
            }
        }
    }
    out
}

fn seconds(spec: &DeviceSpec, c: &Combination) -> f64 {
    let graph = (dlas_zoo::find(c.dataset, &c.model).unwrap().build)();
    let workload = Workload::new(&graph, c, None);
    MockDevice::new(spec.clone())
        .predict(c, &workload)
        .unwrap()
        .total_seconds()
}

#[test]
fn every_prediction_is_positive_and_finite() {
    for spec in specs() {
        for c in combinations(&spec) {
            let t = seconds(&spec, &c);
            assert!(t.is_finite() && t > 0.0, "{} {c:?}: {t}", spec.id);
        }
    }
}

/// What the engine cannot run, a calibrated CPU cannot predict: it says so
/// rather than borrowing another kernel's efficiency.
#[test]
fn a_cpu_refuses_kernels_the_engine_does_not_have() {
    let spec = specs().into_iter().find(|s| s.id == "i7").unwrap();
    let c = Combination {
        compression: Compression::Fp16,
        algorithm: Algorithm::Direct,
        format: Format::Csr,
        ..Combination::host(dlas_core::Dataset::Cifar10, "resnet18", "native")
    };
    let graph = (dlas_zoo::find(c.dataset, &c.model).unwrap().build)();
    let err = MockDevice::new(spec)
        .predict(&c, &Workload::new(&graph, &c, None))
        .unwrap_err();
    // The engine's own refusal (`dlas_core::kernel::kernel_class`).
    assert!(err.0.contains("fp16 runs dense weights only"), "{err}");
}

#[test]
fn tuning_never_slows_a_kernel_down() {
    for spec in specs() {
        for c in combinations(&spec) {
            let tuned = Combination {
                tuned: true,
                ..c.clone()
            };
            assert!(
                seconds(&spec, &tuned) <= seconds(&spec, &c) * (1.0 + 1e-12),
                "{} {c:?}",
                spec.id
            );
        }
    }
}

#[test]
fn more_bandwidth_or_clock_never_slows_down() {
    for spec in specs() {
        let faster_memory = DeviceSpec {
            memory_gbs: spec.memory_gbs * 2.0,
            ..spec.clone()
        };
        let faster_clock = DeviceSpec {
            clock_ghz: spec.clock_ghz * 2.0,
            ..spec.clone()
        };
        for c in combinations(&spec) {
            let base = seconds(&spec, &c);
            assert!(seconds(&faster_memory, &c) <= base, "{} {c:?}", spec.id);
            assert!(seconds(&faster_clock, &c) <= base, "{} {c:?}", spec.id);
        }
    }
}

#[test]
fn pruning_more_never_slows_sparse_code() {
    for spec in specs() {
        for c in combinations(&spec)
            .into_iter()
            .filter(|c| c.format == Format::Csr)
        {
            let pruned_more = Combination {
                level: 0.9,
                ..c.clone()
            };
            assert!(
                seconds(&spec, &pruned_more) <= seconds(&spec, &c),
                "{} {c:?}",
                spec.id
            );
        }
    }
}

#[test]
fn runtime_chosen_kernels_are_not_modelled() {
    let spec = specs().remove(0);
    let mut c = combinations(&spec).remove(0);
    c.algorithm = Algorithm::Auto;
    c.compiler = "tract-opt".into();
    let graph = (dlas_zoo::find(c.dataset, &c.model).unwrap().build)();
    let err = MockDevice::new(spec)
        .predict(&c, &Workload::new(&graph, &c, None))
        .unwrap_err();
    assert!(
        err.0
            .contains("compiler `tract-opt` chooses its own kernels")
    );
}
