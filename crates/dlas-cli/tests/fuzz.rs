//! Fuzzing as tests: every reader of user input gets arbitrary bytes and
//! mutated valid inputs, and must return `Ok` or `Err`, never panic.
//!
//! In the test suite each target runs a fixed number of inputs from a fixed
//! seed (a few seconds in all). `cargo xtask fuzz --seconds N [--target
//! NAME]` sets `DLAS_FUZZ_SECONDS` and the same targets run rounds of fresh
//! seeds until their time is up, printing how many inputs each took. A panic
//! fails the test with proptest's shrunk input.

// Its helper reports the inputs each target took (clippy lets only #[test]s print).
#![allow(clippy::print_stdout)]

mod common;

use common::root;
use dlas_core::{Dataset, Filter, Plan, Study};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::path::Path;
use std::time::{Duration, Instant};

/// Inputs per target in the normal test suite.
const CASES: u32 = 300;
/// Inputs per round of a timed run (`DLAS_FUZZ_SECONDS`).
const ROUND: u32 = 5_000;

/// Runs `check` on inputs from `strategy` until the budget is spent; a
/// panic in `check` fails the test with the smallest input proptest finds.
fn fuzz<S: Strategy>(target: &str, strategy: S, check: impl Fn(S::Value)) {
    let budget = std::env::var("DLAS_FUZZ_SECONDS").ok().map(|s| {
        Duration::from_secs(
            s.parse()
                .expect("DLAS_FUZZ_SECONDS is a whole number of seconds"),
        )
    });
    let cases = if budget.is_some() { ROUND } else { CASES };
    let started = Instant::now();
    let mut inputs: u64 = 0;
    for round in 0u64.. {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&round.to_le_bytes());
        seed[8..8 + target.len().min(24)]
            .copy_from_slice(&target.as_bytes()[..target.len().min(24)]);
        let config = Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
        if let Err(failure) = runner.run(&strategy, |value| {
            check(value);
            Ok(())
        }) {
            panic!("fuzz {target}, round {round}: {failure}");
        }
        inputs += u64::from(cases);
        if budget.is_none_or(|b| started.elapsed() >= b) {
            break;
        }
    }
    println!(
        "fuzz {target}: {inputs} inputs in {:.1} s, none panicked",
        started.elapsed().as_secs_f64()
    );
}

/// Bytes that mean something to TOML, JSON, CSV or protobuf readers, and
/// numbers at the edges of what they hold.
const TOKENS: &[&str] = &[
    "\"",
    ",",
    "[",
    "]",
    "{",
    "}",
    "=",
    ":",
    "\n",
    "\r\n",
    ".",
    "-",
    "#",
    "0",
    "1",
    "-1",
    "2",
    "1e400",
    "-1e400",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "null",
    "true",
    "false",
    "\"\"",
    "[]",
    "{}",
    "18446744073709551616",
    "9223372036854775807",
    "4294967296",
    "1000000000000",
    "0.0",
    "1.5",
    "é",
    "\u{0}",
    "\u{feff}",
    "\\",
    "\\u0000",
    "[[",
    "]]",
    "'",
    "\t",
];

/// One edit of a valid input.
#[derive(Debug, Clone)]
enum Edit {
    /// Overwrite a byte.
    Byte(Index, u8),
    /// Insert a token.
    Insert(Index, Index),
    /// Remove up to n bytes.
    Delete(Index, usize),
    /// Copy a stretch of the input elsewhere.
    Copy(Index, Index, usize),
    /// Cut the input short.
    Truncate(Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(at, b)| Edit::Byte(at, b)),
        (any::<Index>(), any::<Index>()).prop_map(|(at, t)| Edit::Insert(at, t)),
        (any::<Index>(), 1..64usize).prop_map(|(at, n)| Edit::Delete(at, n)),
        (any::<Index>(), any::<Index>(), 1..256usize).prop_map(|(a, b, n)| Edit::Copy(a, b, n)),
        any::<Index>().prop_map(Edit::Truncate),
    ]
}

fn apply(input: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut bytes = input.to_vec();
    for edit in edits {
        let len = bytes.len();
        let at = |i: &Index| if len == 0 { 0 } else { i.index(len + 1) };
        match edit {
            Edit::Byte(i, b) if len > 0 => bytes[i.index(len)] = *b,
            Edit::Byte(..) => bytes.push(0),
            Edit::Insert(i, t) => {
                let token = TOKENS[t.index(TOKENS.len())].as_bytes();
                let at = at(i);
                bytes.splice(at..at, token.iter().copied());
            }
            Edit::Delete(i, n) => {
                let at = at(i).min(len);
                bytes.drain(at..(at + n).min(len));
            }
            Edit::Copy(from, to, n) if len > 0 => {
                let from = from.index(len);
                let piece = bytes[from..(from + n).min(len)].to_vec();
                let to = at(to);
                bytes.splice(to..to, piece);
            }
            Edit::Copy(..) => {}
            Edit::Truncate(i) => bytes.truncate(at(i)),
        }
    }
    bytes
}

/// Arbitrary bytes, or one of `seeds` with a few edits.
fn inputs(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let mutated = (0..seeds.len(), prop::collection::vec(edit(), 1..6))
        .prop_map(move |(i, edits)| apply(&seeds[i], &edits));
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..512),
        4 => mutated,
    ]
}

/// The first `lines` lines of a committed file.
fn head(path: &str, lines: usize) -> Vec<u8> {
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    let mut head: String = text.lines().take(lines).collect::<Vec<_>>().join("\n");
    head.push('\n');
    head.into_bytes()
}

/// A reader of a file given arbitrary content at a fixed path.
fn file_reader(target: &str, seeds: Vec<Vec<u8>>, read: impl Fn(&Path)) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input");
    fuzz(target, inputs(seeds), |bytes| {
        std::fs::write(&path, &bytes).unwrap();
        read(&path);
    });
}

#[test]
fn fuzz_study() {
    let seeds = ["dlas", "compilers"]
        .map(|s| std::fs::read(root().join(format!("data/studies/{s}.toml"))).unwrap());
    fuzz("study", inputs(seeds.to_vec()), |bytes| {
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(study) = Study::parse(&text, Path::new("fuzz.toml")) {
            let plan = Plan::expand(&study);
            let _ = plan.counts();
            let _ = study.check_open_axis("device", &["i7".into()]);
        }
    });
}

#[test]
fn fuzz_filter() {
    let study = Study::load("dlas", &root().join("data/studies")).unwrap();
    let seeds = vec![b"model=resnet18|vgg16, device=i7,batch=1,level=0.8".to_vec()];
    fuzz("filter", inputs(seeds), |bytes| {
        if let Ok(filter) = Filter::parse(&String::from_utf8_lossy(&bytes)) {
            let _ = filter.check(&study);
        }
    });
}

#[test]
fn fuzz_results_csv() {
    let seeds = vec![
        head("data/results/dlas/mock.csv", 12),
        head("data/results/dlas/host.csv", 12),
        head("data/results/compilers/mock.csv", 12),
    ];
    file_reader("results_csv", seeds, |path| {
        let _ = dlas_core::results::read_results(path);
    });
}

#[test]
fn fuzz_samples_jsonl() {
    let seeds = vec![head("data/results/dlas/host.samples.jsonl", 3)];
    file_reader("samples_jsonl", seeds, |path| {
        let _ = dlas_runner::store::read_samples(path);
    });
}

#[test]
fn fuzz_tuning_records() {
    let seeds = vec![
        head("data/results/dlas/tuning/records.jsonl", 8),
        head("data/results/compilers/tuning/records.jsonl", 8),
    ];
    file_reader("tuning_records", seeds, |path| {
        if let Ok(loaded) = dlas_tune::records::load(path) {
            // Bad bytes and costs are skipped line by line, never kept.
            assert!(loaded.records.iter().all(|r| r.check().is_ok()));
            let best = dlas_tune::records::BestOf::from_records(&loaded.records);
            assert!(best.entries.iter().all(|e| e.cost_ms > 0.0));
            for fingerprint in best.fingerprints() {
                let _ = best.table(fingerprint, 2, 1);
            }
        }
    });
}

#[test]
fn fuzz_best_of() {
    let text = std::fs::read_to_string(root().join("data/results/dlas/tuning/best.json")).unwrap();
    let entries: Vec<&str> = text.lines().skip(2).take(4).collect();
    let seed = format!(
        "{{\"version\": 1,\n\"entries\": [\n{}\n]}}\n",
        entries
            .join("\n")
            .trim_end_matches(",\n")
            .trim_end_matches(",")
    );
    file_reader("best_of", vec![seed.into_bytes()], |path| {
        if let Ok(best) = dlas_tune::records::BestOf::load(path) {
            for fingerprint in best.fingerprints() {
                let _ = best.table(fingerprint, 2, 1);
            }
        }
    });
}

#[test]
fn fuzz_environment() {
    let seeds = [
        "dlas/archive/env-94f1df2963ac",
        "compilers/archive/env-20cd37d86cfc",
    ]
    .map(|e| std::fs::read(root().join(format!("data/results/{e}.json"))).unwrap());
    // Saved under a record's name, so that its id is checked against its
    // content; a record that loads renders in Table 1's cells on one row.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("env-94f1df2963ac.json");
    fuzz("environment", inputs(seeds.to_vec()), |bytes| {
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(env) = dlas_runner::environment::Environment::load(&path) {
            assert_eq!(env.id(), "env-94f1df2963ac");
            let table = dlas_report::Table {
                number: 1,
                title: "hosts".into(),
                columns: vec!["cpu".into(), "os".into(), "kernel".into()],
                rows: vec![vec![env.cpu_model, env.os, env.kernel]],
                footer: String::new(),
            };
            let md = table.markdown();
            assert_eq!(md.lines().filter(|l| l.starts_with('|')).count(), 3, "{md}");
            let tex = table.latex();
            assert_eq!(
                tex.lines().filter(|l| l.ends_with(" \\\\")).count(),
                2,
                "{tex}"
            );
        }
    });
}

/// A small network with every operator the importer reads.
fn small_onnx() -> Vec<u8> {
    use dlas_zoo::Op;
    let mut g = dlas_zoo::GraphBuilder::new("small", Dataset::Cifar10);
    let x = g.input();
    let x = g.conv_bn(x, 8, 3, 2, 1, Some(Op::Relu6));
    let y = g.conv(x, 8, 3, 1, 1, 8, true);
    let y = g.batch_norm(y);
    let y = g.relu(y);
    let x = g.add(x, y);
    let x = g.max_pool(x, 2, 2, 0);
    let a = g.avg_pool(x, 2, 2);
    let b = g.max_pool(x, 2, 2, 0);
    let x = g.concat(&[a, b]);
    let s = g.global_avg_pool(x);
    let s = g.conv(s, 16, 1, 1, 0, 1, true);
    let s = g.unary(Op::Sigmoid, s);
    let x = g.mul(x, s);
    let x = g.global_avg_pool(x);
    let x = g.flatten(x);
    g.linear(x, 10);
    let graph = g.finish();
    let weights = dlas_zoo::weights::generate(&graph, 1);
    dlas_onnx::export(&graph, &weights)
}

/// A small transformer with every transformer operator the importer
/// recognises: layer norm, GELU, shifted windows with their mask and
/// relative-position table, patch merging, layer scale, class token,
/// position embedding, global attention and first token.
fn small_transformer_onnx() -> Vec<u8> {
    use dlas_zoo::Attention;
    let mut g = dlas_zoo::GraphBuilder::new("small-transformer", Dataset::Cifar10);
    let x = g.input();
    let x = g.conv(x, 8, 4, 4, 0, 1, true);
    let y = g.layer_norm(x, 1e-5);
    let y = g.pointwise(y, 24, true);
    let y = g.attention(y, Attention::swin(2, 4, 2));
    let x = g.add(x, y);
    let y = g.pointwise(x, 16, true);
    let y = g.gelu(y);
    let y = g.pointwise(y, 8, true);
    let y = g.layer_scale(y);
    let x = g.add(x, y);
    let x = g.space_to_depth(x);
    let x = g.class_token(x);
    let x = g.position_embedding(x);
    let y = g.pointwise(x, 96, true);
    let y = g.attention(y, Attention::global(2));
    let x = g.add(x, y);
    let x = g.first_token(x);
    let x = g.flatten(x);
    g.linear(x, 10);
    let graph = g.finish();
    let weights = dlas_zoo::weights::generate(&graph, 1);
    dlas_onnx::export(&graph, &weights)
}

#[test]
fn fuzz_onnx_bytes() {
    let seeds = vec![small_onnx(), small_transformer_onnx()];
    for seed in &seeds {
        dlas_onnx::import(seed, "small", Dataset::Cifar10).expect("the seed imports");
    }
    fuzz("onnx_bytes", inputs(seeds), |bytes| {
        let _ = dlas_onnx::import(&bytes, "fuzz", Dataset::Cifar10);
    });
}

/// One edit of a decoded ONNX model: the fields the importer reads set to
/// values a file may hold, which byte edits of a protobuf rarely reach.
#[derive(Debug, Clone)]
enum ModelEdit {
    AttributeInt(Index, Index, i64),
    AttributeInts(Index, Index, Index, i64),
    AttributeFloat(Index, Index, f32),
    Dim(Index, Index, i64),
    RawData(Index, usize),
    FloatData(Index, usize),
    DataType(Index, i32),
    RemoveNode(Index),
    DuplicateNode(Index),
    Input(Index, Index, Index),
    OpType(Index, Index),
    RemoveInitializer(Index),
    RemoveGraphInput(Index),
}

const INTERESTING: &[i64] = &[
    -1,
    0,
    1,
    2,
    3,
    7,
    64,
    65_536,
    i32::MAX as i64,
    u32::MAX as i64,
    i64::MAX,
    i64::MIN,
];

fn interesting() -> impl Strategy<Value = i64> {
    prop_oneof![prop::sample::select(INTERESTING), any::<i64>(), -4..64i64]
}

fn model_edit() -> impl Strategy<Value = ModelEdit> {
    let i = || any::<Index>();
    prop_oneof![
        (i(), i(), interesting()).prop_map(|(n, a, v)| ModelEdit::AttributeInt(n, a, v)),
        (i(), i(), i(), interesting())
            .prop_map(|(n, a, k, v)| ModelEdit::AttributeInts(n, a, k, v)),
        (i(), i(), any::<f32>()).prop_map(|(n, a, v)| ModelEdit::AttributeFloat(n, a, v)),
        (i(), i(), interesting()).prop_map(|(t, d, v)| ModelEdit::Dim(t, d, v)),
        (i(), 0..64usize).prop_map(|(t, n)| ModelEdit::RawData(t, n)),
        (i(), 0..64usize).prop_map(|(t, n)| ModelEdit::FloatData(t, n)),
        (i(), -1..20i32).prop_map(|(t, v)| ModelEdit::DataType(t, v)),
        i().prop_map(ModelEdit::RemoveNode),
        i().prop_map(ModelEdit::DuplicateNode),
        (i(), i(), i()).prop_map(|(n, k, from)| ModelEdit::Input(n, k, from)),
        (i(), i()).prop_map(|(n, op)| ModelEdit::OpType(n, op)),
        i().prop_map(ModelEdit::RemoveInitializer),
        i().prop_map(ModelEdit::RemoveGraphInput),
    ]
}

/// `index` into a list of `len`, if the list has any.
fn pick(index: &Index, len: usize) -> Option<usize> {
    (len > 0).then(|| index.index(len))
}

#[test]
fn fuzz_onnx_model() {
    fuzz_model("onnx_model", &small_onnx());
}

/// The transformer's subgraphs, edited: the importer recognises them or
/// refuses them, never panics.
#[test]
fn fuzz_onnx_transformer_model() {
    fuzz_model("onnx_transformer_model", &small_transformer_onnx());
}

/// Runs target `target` on edits of the decoded `seed`.
fn fuzz_model(target: &str, seed: &[u8]) {
    use prost::Message;
    let seed = dlas_onnx::export::decode(seed).unwrap();
    let names: Vec<String> = {
        let graph = seed.graph.as_ref().unwrap();
        let mut names: Vec<String> = graph.node.iter().flat_map(|n| n.output.clone()).collect();
        names.extend(graph.initializer.iter().map(|t| t.name.clone()));
        names.extend(graph.input.iter().map(|t| t.name.clone()));
        names.push("missing".into());
        names
    };
    let ops: Vec<&str> = dlas_onnx::import::SUPPORTED
        .iter()
        .copied()
        .chain(["Softmax", ""])
        .collect();
    let strategy = prop::collection::vec(model_edit(), 1..5);
    fuzz(target, strategy, |edits| {
        let mut model = seed.clone();
        let graph = model.graph.as_mut().unwrap();
        for edit in &edits {
            match edit {
                ModelEdit::AttributeInt(n, a, v) => {
                    if let Some(n) = pick(n, graph.node.len()) {
                        let attrs = &mut graph.node[n].attribute;
                        if let Some(a) = pick(a, attrs.len()) {
                            attrs[a].i = *v;
                        }
                    }
                }
                ModelEdit::AttributeInts(n, a, k, v) => {
                    if let Some(n) = pick(n, graph.node.len()) {
                        let attrs = &mut graph.node[n].attribute;
                        if let Some(a) = pick(a, attrs.len()) {
                            match pick(k, attrs[a].ints.len()) {
                                Some(k) => attrs[a].ints[k] = *v,
                                None => attrs[a].ints.push(*v),
                            }
                        }
                    }
                }
                ModelEdit::AttributeFloat(n, a, v) => {
                    if let Some(n) = pick(n, graph.node.len()) {
                        let attrs = &mut graph.node[n].attribute;
                        if let Some(a) = pick(a, attrs.len()) {
                            attrs[a].f = *v;
                        }
                    }
                }
                ModelEdit::Dim(t, d, v) => {
                    if let Some(t) = pick(t, graph.initializer.len()) {
                        let dims = &mut graph.initializer[t].dims;
                        match pick(d, dims.len()) {
                            Some(d) => dims[d] = *v,
                            None => dims.push(*v),
                        }
                    }
                }
                ModelEdit::RawData(t, n) => {
                    if let Some(t) = pick(t, graph.initializer.len()) {
                        let tensor = &mut graph.initializer[t];
                        let keep = tensor.raw_data.len().min(*n);
                        tensor.raw_data.truncate(keep);
                    }
                }
                ModelEdit::FloatData(t, n) => {
                    if let Some(t) = pick(t, graph.initializer.len()) {
                        let tensor = &mut graph.initializer[t];
                        tensor.float_data = vec![0.5; *n];
                        tensor.raw_data.clear();
                    }
                }
                ModelEdit::DataType(t, v) => {
                    if let Some(t) = pick(t, graph.initializer.len()) {
                        graph.initializer[t].data_type = *v;
                    }
                }
                ModelEdit::RemoveNode(n) => {
                    if let Some(n) = pick(n, graph.node.len()) {
                        graph.node.remove(n);
                    }
                }
                ModelEdit::DuplicateNode(n) => {
                    if let Some(n) = pick(n, graph.node.len()) {
                        let node = graph.node[n].clone();
                        graph.node.insert(n, node);
                    }
                }
                ModelEdit::Input(n, k, from) => {
                    if let Some(n) = pick(n, graph.node.len()) {
                        let name = names[from.index(names.len())].clone();
                        let inputs = &mut graph.node[n].input;
                        match pick(k, inputs.len()) {
                            Some(k) => inputs[k] = name,
                            None => inputs.push(name),
                        }
                    }
                }
                ModelEdit::OpType(n, op) => {
                    if let Some(n) = pick(n, graph.node.len()) {
                        graph.node[n].op_type = ops[op.index(ops.len())].to_string();
                    }
                }
                ModelEdit::RemoveInitializer(t) => {
                    if let Some(t) = pick(t, graph.initializer.len()) {
                        graph.initializer.remove(t);
                    }
                }
                ModelEdit::RemoveGraphInput(t) => {
                    if let Some(t) = pick(t, graph.input.len()) {
                        graph.input.remove(t);
                    }
                }
            }
        }
        let _ = dlas_onnx::import(&model.encode_to_vec(), "fuzz", Dataset::Cifar10);
    });
}
