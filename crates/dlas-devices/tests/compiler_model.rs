//! Properties of the graph-compiler model (`compiler.rs`) that follow from
//! its equations whatever the specifications: a violation is a bug.

use dlas_devices::compiler::{self, GraphCompiler};
use dlas_devices::{DeviceKind, DeviceSpec, load_specs};
use std::path::Path;

fn specs() -> Vec<DeviceSpec> {
    load_specs(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/devices")).unwrap()
}

fn seconds(spec: &DeviceSpec, graph: &dlas_zoo::Graph, c: GraphCompiler, batch: usize) -> f64 {
    compiler::predict(spec, graph, c, batch).total_seconds()
}

const BATCHES: [usize; 4] = [1, 4, 16, 64];

/// The compiler does everything eager does with fewer launches, less
/// traffic and a free choice of kernels, so it is never slower.
#[test]
fn the_vendor_compiler_never_loses_to_eager() {
    for spec in specs() {
        for net in dlas_zoo::all() {
            let graph = (net.build)();
            for batch in BATCHES {
                let eager = seconds(&spec, &graph, GraphCompiler::Eager, batch);
                let vendor = seconds(&spec, &graph, GraphCompiler::Vendor, batch);
                assert!(eager.is_finite() && vendor > 0.0);
                assert!(
                    vendor <= eager,
                    "{} {} batch {batch}: vendor {vendor} > eager {eager}",
                    spec.id,
                    net.name
                );
            }
        }
    }
}

#[test]
fn more_bandwidth_clock_or_less_dispatch_never_slow_down() {
    for spec in specs() {
        let faster = [
            DeviceSpec {
                memory_gbs: spec.memory_gbs * 2.0,
                ..spec.clone()
            },
            DeviceSpec {
                clock_ghz: spec.clock_ghz * 2.0,
                ..spec.clone()
            },
            DeviceSpec {
                dispatch_us: 0.0,
                ..spec.clone()
            },
        ];
        for net in dlas_zoo::catalogue().iter().take(4) {
            let graph = (net.build)();
            for c in GraphCompiler::ALL {
                for batch in BATCHES {
                    let base = seconds(&spec, &graph, c, batch);
                    for f in &faster {
                        assert!(
                            seconds(f, &graph, c, batch) <= base * (1.0 + 1e-12),
                            "{} {} {c:?} {batch}",
                            spec.id,
                            net.name
                        );
                    }
                }
            }
        }
    }
}

/// Per-sample time never grows with batch size: a larger batch fills the
/// device at least as well and shares launches and weights.
#[test]
fn throughput_never_falls_much_with_batch_size() {
    for spec in specs() {
        for net in dlas_zoo::all() {
            let graph = (net.build)();
            for c in GraphCompiler::ALL {
                let per_sample: Vec<f64> = BATCHES
                    .iter()
                    .map(|&b| seconds(&spec, &graph, c, b) / b as f64)
                    .collect();
                for pair in per_sample.windows(2) {
                    // Tile and wave quantisation may cost a few percent.
                    assert!(
                        pair[1] <= pair[0] * 1.05,
                        "{} {} {c:?}: {per_sample:?}",
                        spec.id,
                        net.name
                    );
                }
            }
        }
    }
}

/// A small GPU saturates: beyond some batch, throughput stops growing.
#[test]
fn a_gpu_saturates_at_large_batch() {
    let spec = specs()
        .into_iter()
        .find(|s| s.kind == DeviceKind::Gpu)
        .unwrap();
    let graph = (dlas_zoo::find(dlas_core::Dataset::Imagenet, "resnet50")
        .unwrap()
        .build)();
    let throughput = |b: usize| b as f64 / seconds(&spec, &graph, GraphCompiler::Vendor, b);
    assert!(throughput(64) < 1.1 * throughput(32), "{}", spec.id);
    assert!(throughput(4) > 1.1 * throughput(1), "{}", spec.id);
}
