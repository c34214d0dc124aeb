//! The compiler study's findings (`../shared/papers/ngraphbench-abstract.txt`)
//! as checks on its results: throughput curves of each baseline and
//! compiled configuration ([`super::PAIRS`]), with the words of degree of
//! `claims/mod.rs`.

use super::{Curves, Net, block_of, reversals};
use crate::claims::cells::{Order, Tally, Votes, first_of, num, order};
use crate::claims::{
    Assumption, Checked, Context, Observation, Outcome, Part, TOLERANCE, Verdict, Wording,
    headline, sections,
};
use crate::drift::Drift;
use crate::inputs::Architecture;
use dlas_devices::DeviceKind;
use std::fmt::Write;

/// The batch size at which rankings and block-level gains are compared.
const BATCH: usize = 1;

/// The abstract's three findings, in its order, with the reversal its
/// Figure 1 names checked by name after C1, then the TL;DR's claim about
/// automated tuning (C4, `struggle.rs`).
/// What decides the eager/vendor findings on the mocked devices: the graph
/// compiler's model (`dlas-devices` `compiler.rs`), unmeasured on them.
const GRAPH_COMPILER: Assumption = Assumption {
    on: &[DeviceKind::Cpu, DeviceKind::Gpu],
    text: "a vendor compiler fuses batch norm and element-wise operators into the kernel before them, removes the framework's per-operator dispatch, and picks a kernel per shape while eager runs one generic kernel (compiler.rs), so the mocked gains follow from operator counts and specifications",
};

pub fn findings() -> Vec<Observation> {
    vec![
        Observation {
            numeral: "C1",
            layer: "Systems software",
            statement: "A vendor compiler can reverse which architecture is faster: a CNN ahead of a transformer before compilation falls behind it after, or the reverse.",
            wording: Wording::Quoted,
            source: "We demonstrate how vendor-specific optimizations can invalidate relative performance comparisons between architectural archetypes, with performance advantages sometimes completely reversing after compilation.",
            predicate: "On some device, for some baseline and compiled pair, a transformer and a network without attention measured at batch 1 swap their order by throughput, by more than the tolerance: the leader's lead uncompiled times the other's lead compiled exceeds it.",
            check: reversal,
            assumptions: &[GRAPH_COMPILER],
        },
        Observation {
            numeral: "C1a",
            layer: "Systems software",
            statement: "The reversal of NGraphBench's Figure 1, by name: on the Orin, EfficientNet-B0 is faster than Swin-T uncompiled and slower after the vendor compiler; on the Xeon, the inverse.",
            wording: Wording::Quoted,
            source: "Figure 1: On the Orin, the convolutional-based EfficientNet has higher throughput than the transformer-based Swin. Applying TensorRT significantly improves throughput for both models. However, the EfficientNet is now slower than the Swin. On the Xeon with OpenVINO, we observe the exact inverse behavior.",
            predicate: "On orin-gpu, efficientnet_b0's throughput at batch 1 exceeds swin_t's by more than the tolerance with eager, and falls below it by more than the tolerance with vendor (TensorRT in the paper); on xeon (OpenVINO in the paper), swin_t leads uncompiled and trails compiled in the same way. Both are modelled devices. The host part is the Xeon's half measured: OpenVINO at f32 precision (openvino-f32, so the comparison is about compilation, not precision) against ONNX Runtime with its graph optimizations off, which plays the uncompiled graph, on the measured host CPU. Each device is a part; a device without both networks under both configurations cannot test its part.",
            check: figure1_reversal,
            assumptions: &[GRAPH_COMPILER],
        },
        Observation {
            numeral: "C2",
            layer: "Systems software",
            statement: "A compiler's gain depends on both the batch size and the architecture.",
            wording: Wording::Quoted,
            source: "Our systematic analysis reveals that graph compilers exhibit performance patterns highly dependent on both neural architecture and batch sizes.",
            predicate: "Batch: for most (device, network, compiled configuration) with two or more batch sizes, the largest RTR over batch sizes exceeds the smallest by more than the tolerance. Architecture: for most (device, compiled configuration) with two or more networks, the largest RTR at batch 1 over networks exceeds the smallest by more than the tolerance.",
            check: gain_depends,
            assumptions: &[GRAPH_COMPILER],
        },
        Observation {
            numeral: "C3",
            layer: "Systems software",
            statement: "Repeated blocks of simple architectures gain more from a vendor compiler as depth grows.",
            wording: Wording::Quoted,
            source: "Through fine-grained block-level experimentation, we establish that vendor-specific compilers can leverage repeated patterns in simple architectures, yielding disproportionate throughput gains as model depth increases.",
            predicate: "For most (device, compiled configuration, simple block type: convolutions, batch norm and element-wise operators only), the RTR at batch 1 of the deepest block-repeat model exceeds that of the shallowest by more than the tolerance.",
            check: deeper_gains_more,
            assumptions: &[GRAPH_COMPILER],
        },
        super::struggle::finding(),
    ]
}

/// The architecture of a network of the study, from the zoo's operators.
pub(super) fn architecture(context: &Context, net: &Net) -> Option<Architecture> {
    context
        .networks
        .iter()
        .find(|n| n.dataset == net.0 && n.model == net.1)
        .map(|n| n.architecture)
}

/// Devices in the order their first row appears.
fn devices(context: &Context) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in context.rows {
        if !out.contains(&r.device) {
            out.push(r.device.clone());
        }
    }
    out
}

/// The whole networks (not block-repeat models) with rows, in row order.
fn networks(context: &Context) -> Vec<Net> {
    let mut out: Vec<Net> = Vec::new();
    for r in context.rows {
        let net = (r.dataset, r.model.clone());
        if block_of(&r.model).is_none() && !out.contains(&net) {
            out.push(net);
        }
    }
    out
}

fn reversal(context: &Context) -> Outcome {
    let curves = Curves::new(context.rows);
    let models = networks(context);
    let transformer = |m: &Net| architecture(context, m).map(|a| a == Architecture::Transformer);
    let mut comparable = false;
    let mut entered = Vec::new();
    let mut found = Vec::new();
    for device in devices(context) {
        if curves.pairs_on(&device).is_empty() {
            continue;
        }
        let kinds: Vec<bool> = models
            .iter()
            .filter(|m| {
                curves
                    .curves
                    .keys()
                    .any(|(d, net, _)| d == &device && net == *m)
            })
            .filter_map(&transformer)
            .collect();
        if kinds.contains(&true) && kinds.contains(&false) {
            comparable = true;
            entered.push(device.clone());
        }
        found.extend(
            reversals(&curves, &device, &models, BATCH)
                .into_iter()
                .filter(|r| {
                    matches!(
                        (transformer(&r.first), transformer(&r.second)),
                        (Some(a), Some(b)) if a != b
                    )
                }),
        );
    }
    let part = if !comparable {
        Part::untestable(
            "no device has a transformer and a network without attention measured uncompiled and compiled",
        )
    } else if found.is_empty() {
        Part::new(
            Verdict::DoesNotHold,
            format!("no transformer and attention-free network swap places at batch {BATCH}"),
        )
        .against(format!(
            "on {}, every pair of a transformer and an attention-free network keeps its order at batch {BATCH}, or changes it by less than the tolerance",
            entered.join(", ")
        ))
    } else {
        let shown: Vec<String> = found.iter().take(3).map(|r| r.describe()).collect();
        Part::new(
            Verdict::Holds,
            format!(
                "{} reversals at batch {BATCH}, e.g. {}",
                found.len(),
                shown.join("; ")
            ),
        )
    };
    Outcome::of(vec![part], entered)
}

/// One part of Figure 1's reversal: (device, the network that leads
/// uncompiled, the one that leads compiled, the uncompiled and the
/// compiled configuration).
type Reversal = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

/// The reversal Figure 1 of NGraphBench names: (device, the network that
/// leads uncompiled, the one that leads compiled, the uncompiled and the
/// compiled configuration). The mocked Orin and Xeon run the modelled
/// eager framework and vendor compiler; the measured host runs the Xeon's
/// half with OpenVINO, the paper's compiler there, at f32 (so the
/// comparison is about compilation, not precision) against ONNX Runtime
/// without graph optimizations as the uncompiled graph.
/// The two groups are checked apart: a results file with rows of either
/// modelled device must have both (the figure's two halves), one with
/// rows of the host checks the host's part alone.
const FIGURE1: [&[Reversal]; 2] = [
    &[
        ("orin-gpu", "efficientnet_b0", "swin_t", "eager", "vendor"),
        ("xeon", "swin_t", "efficientnet_b0", "eager", "vendor"),
    ],
    &[(
        "host",
        "swin_t",
        "efficientnet_b0",
        "ort-noopt",
        "openvino-f32",
    )],
];

fn figure1_reversal(context: &Context) -> Outcome {
    let curves = Curves::new(context.rows);
    let net = |m: &str| (dlas_core::Dataset::Imagenet, m.to_string());
    let mut parts = Vec::new();
    let mut entered = Vec::new();
    let has_rows = |device: &str| context.rows.iter().any(|r| r.device == device);
    let groups: Vec<_> = FIGURE1
        .iter()
        .filter(|group| group.iter().any(|part| has_rows(part.0)))
        .collect();
    if groups.is_empty() {
        return Outcome::of(
            vec![Part::untestable(
                "no rows of orin-gpu, xeon (the figure's modelled halves) or host (its Xeon half measured with OpenVINO)",
            )],
            entered,
        );
    }
    for &(device, first, second, baseline, compiled) in groups.into_iter().flat_map(|g| g.iter()) {
        let t = |m: &str, c: &str| curves.at(device, &net(m), c, BATCH);
        let (Some(fb), Some(sb), Some(fc), Some(sc)) = (
            t(first, baseline),
            t(second, baseline),
            t(first, compiled),
            t(second, compiled),
        ) else {
            parts.push(Part::untestable(format!(
                "{device}: {first} and {second} are not both measured with {baseline} and {compiled} at batch {BATCH}"
            )));
            continue;
        };
        entered.push(device.to_string());
        let (before, after) = (order(fb, sb), order(fc, sc));
        let word = |o: Order| match o {
            Order::Above => "ahead of",
            Order::Tie => "tied with",
            Order::Below => "behind",
        };
        let evidence = format!(
            "{device}: {first} {} {second} uncompiled ({} vs {} samples/s, {baseline}) and {} it compiled ({} vs {}, {compiled})",
            word(before),
            num(fb),
            num(sb),
            word(after),
            num(fc),
            num(sc)
        );
        let mut against = Vec::new();
        if before != Order::Above {
            against.push(format!(
                "uncompiled, {first} is {} {second} ({}x), where the paper has it ahead",
                word(before),
                num(fb / sb)
            ));
        }
        if after != Order::Below {
            against.push(format!(
                "compiled, {first} is {} {second} ({}x), where the paper has it behind",
                word(after),
                num(fc / sc)
            ));
        }
        parts.push(
            Part::new(Verdict::of(against.is_empty()), evidence)
                .against(format!("{device}: {}", against.join("; "))),
        );
    }
    Outcome::of(parts, entered)
}

fn gain_depends(context: &Context) -> Outcome {
    let curves = Curves::new(context.rows);
    let models = networks(context);
    let mut by_batch = Tally::default();
    let mut by_network = Tally::default();
    let mut spread_batch: f64 = 1.0;
    let mut spread_network: f64 = 1.0;
    let (mut steady_batch, mut steady_network) = (Vec::new(), Vec::new());
    let mut entered = Vec::new();
    for device in devices(context) {
        for (baseline, compiled) in curves.pairs_on(&device) {
            let mut at_one = Vec::new();
            for model in &models {
                let (Some(c), Some(b)) = (
                    curves.get(&device, model, compiled),
                    curves.get(&device, model, baseline),
                ) else {
                    continue;
                };
                let rtrs: Vec<f64> = c
                    .points
                    .keys()
                    .filter_map(|&batch| crate::metrics::rtr(c, b, batch))
                    .collect();
                if let Some(r) = crate::metrics::rtr(c, b, BATCH) {
                    at_one.push(r);
                }
                if rtrs.len() >= 2 {
                    let spread = spread_of(&rtrs);
                    spread_batch = spread_batch.max(spread);
                    by_batch.add(spread > TOLERANCE);
                    if spread <= TOLERANCE {
                        steady_batch.push(format!(
                            "{} on {device} ({compiled}) {}x",
                            model.1,
                            num(spread)
                        ));
                    }
                    if !entered.contains(&device) {
                        entered.push(device.clone());
                    }
                }
            }
            if at_one.len() >= 2 {
                let spread = spread_of(&at_one);
                spread_network = spread_network.max(spread);
                by_network.add(spread > TOLERANCE);
                if spread <= TOLERANCE {
                    steady_network.push(format!("{device} ({compiled}) {}x", num(spread)));
                }
                if !entered.contains(&device) {
                    entered.push(device.clone());
                }
            }
        }
    }
    let part = |tally: Tally, spread: f64, what: &str, steady: &[String]| {
        if tally.total == 0 {
            Part::untestable(format!("no configuration has two {what} measured"))
        } else {
            Part::new(
                Verdict::of(tally.majority()),
                format!(
                    "RTR varies by more than {}x over {what} in {tally} (largest spread {}x)",
                    num(TOLERANCE),
                    num(spread)
                ),
            )
            .against(format!(
                "RTR within the tolerance over {what} (spread) in {} of {}: {}",
                steady.len(),
                tally.total,
                first_of(steady, 4)
            ))
        }
    };
    Outcome::of(
        vec![
            part(by_batch, spread_batch, "batch sizes", &steady_batch),
            part(by_network, spread_network, "networks", &steady_network),
        ],
        entered,
    )
}

/// Largest over smallest of positive values.
fn spread_of(values: &[f64]) -> f64 {
    let max = values.iter().copied().fold(f64::MIN, f64::max);
    let min = values.iter().copied().fold(f64::MAX, f64::min);
    max / min
}

fn deeper_gains_more(context: &Context) -> Outcome {
    let curves = Curves::new(context.rows);
    let mut kinds: Vec<String> = Vec::new();
    for r in context.rows {
        if let Some((kind, _)) = block_of(&r.model)
            && architecture(context, &(r.dataset, r.model.clone())) == Some(Architecture::Cnn)
            && !kinds.iter().any(|k| k == kind)
        {
            kinds.push(kind.to_string());
        }
    }
    let mut grows = Votes::default();
    let mut examples = Vec::new();
    let mut flat = Vec::new();
    let mut entered = Vec::new();
    for device in devices(context) {
        for (baseline, compiled) in curves.pairs_on(&device) {
            for kind in &kinds {
                let mut gains: Vec<(usize, f64)> = curves
                    .curves
                    .keys()
                    .filter(|(d, _, c)| d == &device && c == compiled)
                    .filter_map(|(_, net, _)| {
                        let (k, depth) = block_of(&net.1)?;
                        (k == kind && architecture(context, net) == Some(Architecture::Cnn))
                            .then_some(())?;
                        let gain = curves.at(&device, net, compiled, BATCH)?
                            / curves.at(&device, net, baseline, BATCH)?;
                        Some((depth, gain))
                    })
                    .collect();
                gains.sort_by_key(|(d, _)| *d);
                let (Some(&(shallow, low)), Some(&(deep, high))) = (gains.first(), gains.last())
                else {
                    continue;
                };
                if shallow == deep {
                    continue;
                }
                let o = order(high, low);
                grows.add(o, Order::Above);
                let line = format!(
                    "{kind} on {device} ({compiled}): RTR {} at depth {shallow}, {} at depth {deep}",
                    num(low),
                    num(high)
                );
                if o != Order::Above {
                    flat.push(line.clone());
                }
                if examples.len() < 3 {
                    examples.push(line);
                }
                if !entered.contains(&device) {
                    entered.push(device.clone());
                }
            }
        }
    }
    let part = if grows.total() == 0 {
        Part::untestable(
            "no simple block type is measured at two depths uncompiled and compiled on one device",
        )
    } else {
        Part::new(
            Verdict::of(grows.tally().majority()),
            format!(
                "the deepest model gains more than the shallowest, beyond the tolerance, in {grows}: {}",
                examples.join("; ")
            ),
        )
        .against(format!(
            "the deepest gains no more than the shallowest beyond the tolerance: {}",
            first_of(&flat, 4)
        ))
    };
    Outcome::of(vec![part], entered)
}

/// `paper-tables/compilers/claims.md`: each finding, how it is checked and
/// what each results file says.
/// (`_drift` is unused: RTR is a ratio of medians, which the tolerance decides.)
pub fn markdown(checked: &[Checked], _drift: Option<Drift>) -> String {
    let mut out = String::from("# The compiler study's findings, checked\n\n");
    out += "Generated by `cargo xtask reproduce --study compilers`; never edit by hand. \
            `dlas claims --study compilers FILE...` runs the same checks on any results file.\n\n";
    out += &headline(&findings(), checked);
    out += "\n\n";
    let _ = writeln!(
        out,
        "Each finding is a predicate over throughput curves (batch size / median latency) of each \
         baseline and compiled configuration: eager and vendor on the mocked devices (both \
         modelled); on the measured host, ort-noopt (ONNX Runtime with its graph optimizations \
         off, which plays the uncompiled graph) against OpenVINO at f32 (openvino-f32) and at its \
         default precision (openvino-native), the native engine and TVM each untuned and tuned \
         (untuned TVM has no schedule at all: TVM 0.27 has no fallback CPU schedules), \
         tract-plain and tract-opt, ort-noopt and ort-opt. RTR is \
         defined in `docs/metrics.md`; *most* is more than half of the cells and two gains differ \
         when they are more than {:.0}% apart, as for the DLAS study's observations: closer than \
         that they tie, and a tie never counts for a finding. RTR is a ratio of medians with no \
         interval, so the tolerance applies to measured rows too. A finding that does not hold \
         says what goes against it (*Against it*), generated from the data. C1a is not in the \
         abstract: it checks by name the reversal NGraphBench's Figure 1 shows. C4 is the TL;DR's \
         claim about automated tuning, on measured TVM rows. Architectures \
         are read from the zoo's operators: a transformer has attention, a CNN only convolutions, \
         batch norm and element-wise operators.\n",
        100.0 * (TOLERANCE - 1.0)
    );
    sections(&mut out, &findings(), checked);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compression::Sweeps;
    use crate::inputs::Network;
    use dlas_core::results::Status;
    use dlas_core::{Algorithm, Compression, Dataset, Format, Layout, ResultRow};
    use std::collections::BTreeMap;

    fn row(device: &str, model: &str, compiler: &str, batch: usize, throughput: f64) -> ResultRow {
        let mut r = crate::claims::fixtures::row(
            device,
            Dataset::Imagenet,
            model,
            Compression::Dense,
            Algorithm::Auto,
            false,
            batch as f64 * 1e3 / throughput,
        );
        r.compiler = compiler.into();
        r.batch = batch;
        r.format = Format::Dense;
        r.layout = Layout::Nchw;
        r.status = Status::Ok;
        r
    }

    fn network(model: &str, architecture: Architecture) -> Network {
        Network {
            dataset: Dataset::Imagenet,
            model: model.into(),
            params: 1,
            architecture,
        }
    }

    fn check(numeral: &str, rows: &[ResultRow], networks: &[Network]) -> Outcome {
        let kinds = BTreeMap::new();
        let sweeps = Sweeps::default();
        let context = Context {
            rows,
            kinds: &kinds,
            networks,
            sweeps: &sweeps,
            accuracy: &[],
            drift: None,
        };
        findings()
            .into_iter()
            .find(|o| o.numeral == numeral)
            .unwrap()
            .check(&context)
    }

    fn archetypes() -> Vec<Network> {
        vec![
            network("cnn", Architecture::Cnn),
            network("vit", Architecture::Transformer),
            network("blocks-resnet-1", Architecture::Cnn),
            network("blocks-resnet-8", Architecture::Cnn),
        ]
    }

    #[test]
    fn c1_needs_a_flip_between_archetypes() {
        // The CNN leads uncompiled; compiled, the transformer leads or not.
        let rows = |vit_compiled: f64| {
            vec![
                row("orin-gpu", "cnn", "eager", 1, 100.0),
                row("orin-gpu", "vit", "eager", 1, 50.0),
                row("orin-gpu", "cnn", "vendor", 1, 200.0),
                row("orin-gpu", "vit", "vendor", 1, vit_compiled),
            ]
        };
        let holds = check("C1", &rows(300.0), &archetypes());
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        assert!(holds.evidence[0].contains("on orin-gpu cnn beats vit uncompiled (100 vs 50"));
        assert_eq!(holds.devices, ["orin-gpu"]);
        let fails = check("C1", &rows(150.0), &archetypes());
        assert_eq!(fails.verdict, Verdict::DoesNotHold);
        // 100 against 98 uncompiled, 200 against 210 compiled: the standing
        // changes by 1.02 x 1.05 = 1.07x, within the tolerance: noise, not
        // a reversal.
        let mut marginal = rows(210.0);
        marginal[1] = row("orin-gpu", "vit", "eager", 1, 98.0);
        assert_eq!(
            check("C1", &marginal, &archetypes()).verdict,
            Verdict::DoesNotHold
        );
        // Two CNNs that swap places are not the archetypes the finding names.
        let cnns = [
            network("cnn", Architecture::Cnn),
            network("vit", Architecture::Cnn),
        ];
        assert_eq!(
            check("C1", &rows(300.0), &cnns).verdict,
            Verdict::CannotBeTested
        );
    }

    #[test]
    fn c1a_checks_figure_1s_reversal_by_name() {
        // The paper's Figure 1: on the Orin EfficientNet-B0 leads eager and
        // trails vendor; on the Xeon the inverse.
        let rows = |orin_effnet_vendor: f64| {
            vec![
                row("orin-gpu", "efficientnet_b0", "eager", 1, 150.0),
                row("orin-gpu", "swin_t", "eager", 1, 100.0),
                row(
                    "orin-gpu",
                    "efficientnet_b0",
                    "vendor",
                    1,
                    orin_effnet_vendor,
                ),
                row("orin-gpu", "swin_t", "vendor", 1, 300.0),
                row("xeon", "efficientnet_b0", "eager", 1, 100.0),
                row("xeon", "swin_t", "eager", 1, 150.0),
                row("xeon", "efficientnet_b0", "vendor", 1, 300.0),
                row("xeon", "swin_t", "vendor", 1, 200.0),
            ]
        };
        let holds = check("C1a", &rows(200.0), &[]);
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        assert_eq!(holds.devices, ["orin-gpu", "xeon"]);
        // 290 against 300 compiled is a tie, not a reversal.
        let tie = check("C1a", &rows(290.0), &[]);
        assert_eq!(tie.verdict, Verdict::DoesNotHold);
        assert_eq!(
            tie.explanation,
            [
                "orin-gpu: compiled, efficientnet_b0 is tied with swin_t (0.967x), where the paper has it behind"
            ]
        );
        let orin_only: Vec<_> = rows(200.0)
            .into_iter()
            .filter(|r| r.device == "orin-gpu")
            .collect();
        assert_eq!(
            check("C1a", &orin_only, &[]).verdict,
            Verdict::CannotBeTested
        );
    }

    #[test]
    fn c2_needs_gains_that_vary_with_batch_and_network() {
        let rows = |cnn_vendor_2: f64| {
            vec![
                row("xeon", "cnn", "eager", 1, 100.0),
                row("xeon", "cnn", "eager", 2, 150.0),
                row("xeon", "cnn", "vendor", 1, 300.0),
                row("xeon", "cnn", "vendor", 2, cnn_vendor_2),
                row("xeon", "vit", "eager", 1, 100.0),
                row("xeon", "vit", "eager", 2, 150.0),
                row("xeon", "vit", "vendor", 1, 120.0),
                row("xeon", "vit", "vendor", 2, 300.0),
            ]
        };
        // cnn: RTR 3 then 2; vit: 1.2 then 2; at batch 1: 3 against 1.2.
        let holds = check("C2", &rows(300.0), &archetypes());
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        assert!(
            holds.evidence[0].contains("2 of 2 (100%)"),
            "{:?}",
            holds.evidence
        );
        // cnn's RTR stays 3 at batch 2: one of two configurations varies.
        let fails = check("C2", &rows(450.0), &archetypes());
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        assert_eq!(
            check("C2", &[], &archetypes()).verdict,
            Verdict::CannotBeTested
        );
    }

    #[test]
    fn c3_needs_deeper_simple_blocks_to_gain_more() {
        let rows = |deep_vendor: f64| {
            vec![
                row("orin-gpu", "blocks-resnet-1", "eager", 1, 100.0),
                row("orin-gpu", "blocks-resnet-1", "vendor", 1, 150.0),
                row("orin-gpu", "blocks-resnet-8", "eager", 1, 50.0),
                row("orin-gpu", "blocks-resnet-8", "vendor", 1, deep_vendor),
            ]
        };
        let holds = check("C3", &rows(100.0), &archetypes());
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        assert!(holds.evidence[0].contains("RTR 1.5 at depth 1, 2 at depth 8"));
        let fails = check("C3", &rows(60.0), &archetypes());
        assert_eq!(fails.verdict, Verdict::DoesNotHold);
        // A block type with attention is not a simple architecture.
        let complex = [
            network("blocks-resnet-1", Architecture::Transformer),
            network("blocks-resnet-8", Architecture::Transformer),
        ];
        assert_eq!(
            check("C3", &rows(100.0), &complex).verdict,
            Verdict::CannotBeTested
        );
    }
}
