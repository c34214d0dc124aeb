//! Loading a graph into a list of fused steps, and running it.
//!
//! Loading folds every batch norm that directly follows a convolution into
//! its weights and bias, fuses a following residual Add and activation into
//! the convolution's epilogue, and packs every layer's weights once. A
//! fused intermediate node has exactly one consumer (the next node of its
//! chain), so nothing else can observe that its value was never stored.

use crate::config::{ConfigError, DType, EngineConfig};
use crate::conv::Conv2d;
use crate::epilogue::Activation;
use crate::ops;
use crate::tuning::{LayerKey, ScheduleTable, workload_of};
use dlas_core::Layout;
use dlas_zoo::quant::ActivationQuant;
use dlas_zoo::weights::{Params, Weights};
use dlas_zoo::{Graph, NodeId, Op, Pool, Shape};
use half::f16;
use half::slice::HalfFloatSliceExt;
use std::borrow::Cow;

/// Batch-norm epsilon, as in PyTorch and the reference.
const BN_EPS: f64 = 1e-5;

#[derive(Debug)]
enum Step {
    Conv {
        conv: Box<Conv2d>,
        input: NodeId,
        residual: Option<NodeId>,
    },
    Affine {
        input: NodeId,
        scale: Vec<f32>,
        shift: Vec<f32>,
        act: Activation,
    },
    Unary {
        input: NodeId,
        act: Activation,
    },
    Add {
        a: NodeId,
        b: NodeId,
        act: Activation,
    },
    Mul {
        a: NodeId,
        b: NodeId,
    },
    Pool {
        input: NodeId,
        pool: Pool,
        max: bool,
    },
    GlobalAvgPool {
        input: NodeId,
    },
    Concat {
        inputs: Vec<NodeId>,
    },
    Flatten {
        input: NodeId,
    },
}

impl Step {
    fn inputs(&self) -> Vec<NodeId> {
        match self {
            Step::Conv {
                input, residual, ..
            } => std::iter::once(*input).chain(*residual).collect(),
            Step::Add { a, b, .. } | Step::Mul { a, b } => vec![*a, *b],
            Step::Concat { inputs } => inputs.clone(),
            Step::Affine { input, .. }
            | Step::Unary { input, .. }
            | Step::Pool { input, .. }
            | Step::GlobalAvgPool { input }
            | Step::Flatten { input } => vec![*input],
        }
    }
}

/// An activation at rest between steps.
enum Stored {
    /// The first `len` values of a buffer, which may be longer (see `Arena`).
    F32(Vec<f32>, usize),
    F16(Vec<f16>),
    I8(Vec<i8>, ActivationQuant),
}

impl Stored {
    /// Stores the first `len` of `values` as `dtype`; int8 uses the node's
    /// quantiser `q`. Returns the f32 buffer when the value was converted.
    fn new(
        (values, len): (Vec<f32>, usize),
        dtype: DType,
        q: Option<ActivationQuant>,
    ) -> (Stored, Option<Vec<f32>>) {
        let used = &values[..len];
        let stored = match (dtype, q) {
            (DType::I8, Some(q)) => Stored::I8(used.iter().map(|&v| q.quantize(v)).collect(), q),
            (DType::F32 | DType::I8, _) => return (Stored::F32(values, len), None),
            (DType::F16, _) => {
                let mut h = vec![f16::ZERO; len];
                h.convert_from_f32_slice(used);
                Stored::F16(h)
            }
        };
        (stored, Some(values))
    }

    /// The values as f32 (F16C conversion for f16 storage).
    fn to_f32(&self) -> Cow<'_, [f32]> {
        match self {
            Stored::F32(v, len) => Cow::Borrowed(&v[..*len]),
            Stored::F16(h) => {
                let mut v = vec![0.0; h.len()];
                h.convert_to_f32_slice(&mut v);
                Cow::Owned(v)
            }
            Stored::I8(v, q) => Cow::Owned(v.iter().map(|&x| q.dequantize(x)).collect()),
        }
    }
}

/// A compiled network: fused steps with packed weights and its own threads.
pub struct Engine {
    shapes: Vec<Shape>,
    /// (node whose value the step produces, the step), in execution order.
    steps: Vec<(NodeId, Step)>,
    /// How many steps read each node, to free values after their last use.
    readers: Vec<usize>,
    output: NodeId,
    layout: Layout,
    dtype: DType,
    /// int8 only: the quantiser of every node's output.
    quant: Option<Vec<ActivationQuant>>,
    pool: rayon::ThreadPool,
    default_scheduled: Vec<LayerKey>,
    /// f32 activation buffers of earlier runs, for later runs to reuse.
    arena: Arena,
}

/// Buffers kept across runs, so a run's convolutions write into memory
/// that is already mapped and sized instead of allocating and zeroing
/// fresh pages per layer (on MobileNetV2 at 224x224 that was about a tenth
/// of the run). Buffers keep their full length (a value is its first `len`
/// entries, `Stored::F32`), so reuse never zeroes them again. A buffer's
/// contents are whatever its last user left: only convolutions and the
/// input copy take from the arena, and each writes every value it stores.
#[derive(Default)]
struct Arena(std::sync::Mutex<Vec<Vec<f32>>>);

impl Arena {
    /// A buffer of at least `len` values (unspecified, not uninitialised):
    /// the smallest kept one that is long enough, else the longest,
    /// extended.
    fn take(&self, len: usize) -> Vec<f32> {
        let mut kept = self.0.lock().expect("the arena's users do not panic");
        let fits = kept
            .iter()
            .enumerate()
            .filter(|(_, v)| v.len() >= len)
            .min_by_key(|(_, v)| v.len())
            .or_else(|| kept.iter().enumerate().max_by_key(|(_, v)| v.len()))
            .map(|(i, _)| i);
        let mut v = fits.map_or_else(Vec::new, |i| kept.swap_remove(i));
        if v.len() < len {
            v.resize(len, 0.0);
        }
        v
    }

    fn give(&self, v: Vec<f32>) {
        self.0
            .lock()
            .expect("the arena's users do not panic")
            .push(v);
    }
}

fn activation(op: &Op) -> Option<Activation> {
    Some(match op {
        Op::Relu => Activation::Relu,
        Op::Relu6 => Activation::Relu6,
        Op::Silu => Activation::Silu,
        Op::Sigmoid => Activation::Sigmoid,
        _ => return None,
    })
}

/// Per-channel (scale, shift) of a batch norm in inference form.
fn bn_affine(p: Option<&Params>) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let Some(Params::BatchNorm {
        gamma,
        beta,
        mean,
        var,
    }) = p
    else {
        anyhow::bail!("batch norm without its parameters");
    };
    let scale: Vec<f64> = gamma
        .iter()
        .zip(var)
        .map(|(&g, &v)| g as f64 / (v as f64 + BN_EPS).sqrt())
        .collect();
    let shift = beta
        .iter()
        .zip(mean)
        .zip(&scale)
        .map(|((&b, &m), s)| b as f64 - m as f64 * s)
        .collect();
    Ok((scale, shift))
}

impl Engine {
    /// Compiles `graph` with `weights` for `config`, every layer with its
    /// default (untuned) schedule unless `config` names one.
    pub fn compile(
        graph: &Graph,
        weights: &Weights,
        config: &EngineConfig,
    ) -> anyhow::Result<Engine> {
        Engine::compile_with(graph, weights, config, &ScheduleTable::default())
    }

    /// Compiles `graph` with the tuned schedules of `tuned` where it has
    /// one for a layer's [`LayerKey`]; other layers run their default
    /// (listed by [`Engine::default_scheduled`]). A schedule in `config`
    /// overrides both.
    pub fn compile_with(
        graph: &Graph,
        weights: &Weights,
        config: &EngineConfig,
        tuned: &ScheduleTable,
    ) -> anyhow::Result<Engine> {
        if config.threads == 0 {
            return Err(ConfigError::Threads.into());
        }
        if config.algorithm == dlas_core::Algorithm::Auto {
            return Err(ConfigError::AutoAlgorithm.into());
        }
        anyhow::ensure!(
            weights.by_node.len() == graph.nodes.len(),
            "weights are for a graph of {} nodes, not {}",
            weights.by_node.len(),
            graph.nodes.len()
        );
        let n = graph.nodes.len();
        let quant = match config.dtype {
            DType::I8 => {
                let q = config.quant.as_ref().ok_or(ConfigError::MissingQuant)?;
                if q.activations.len() != n || q.weights.len() != n {
                    return Err(ConfigError::MissingQuant.into());
                }
                Some(q)
            }
            _ => None,
        };
        let mut consumers = vec![Vec::new(); n];
        for (id, node) in graph.nodes.iter().enumerate() {
            for &i in &node.inputs {
                consumers[i].push(id);
            }
        }
        // The single consumer of `id`, if it has exactly one.
        let only = |id: NodeId| match consumers[id].as_slice() {
            [c] => Some(*c),
            _ => None,
        };
        let mut fused = vec![false; n];
        let mut steps = Vec::new();
        let mut default_scheduled = Vec::new();
        for (id, node) in graph.nodes.iter().enumerate().skip(1) {
            if fused[id] {
                continue;
            }
            let params = weights.by_node[id].as_ref();
            let (end, step) = match &node.op {
                Op::Conv(_) | Op::Linear { .. } => {
                    let w = workload_of(graph, id).expect("a convolution or linear node");
                    let (mut wt, bias) = match params {
                        Some(Params::Conv { weight, bias }) => (
                            weight.iter().map(|&v| v as f64).collect::<Vec<_>>(),
                            bias.clone(),
                        ),
                        Some(Params::Linear { weight, bias }) => (
                            weight.iter().map(|&v| v as f64).collect(),
                            Some(bias.clone()),
                        ),
                        _ => anyhow::bail!("node {} lacks its weights", node.name),
                    };
                    let mut b: Vec<f64> = bias.map_or_else(
                        || vec![0.0; w.out_channels],
                        |b| b.iter().map(|&v| v as f64).collect(),
                    );
                    let mut end = id;
                    let mut folded = vec![1.0f64; w.out_channels];
                    if let Some(bn) = only(end).filter(|&c| graph.nodes[c].op == Op::BatchNorm) {
                        let (scale, shift) = bn_affine(weights.by_node[bn].as_ref())?;
                        folded.clone_from(&scale);
                        let red = w.reduction();
                        for oc in 0..w.out_channels {
                            wt[oc * red..(oc + 1) * red]
                                .iter_mut()
                                .for_each(|v| *v *= scale[oc]);
                            b[oc] = b[oc] * scale[oc] + shift[oc];
                        }
                        fused[bn] = true;
                        end = bn;
                    }
                    let mut residual = None;
                    if let Some(add) =
                        only(end).filter(|&c| graph.nodes[c].op == Op::Add && !fused[c])
                    {
                        let ins = &graph.nodes[add].inputs;
                        let other = if ins[0] == end { ins[1] } else { ins[0] };
                        // The other operand must already exist when this conv runs.
                        if other < id && other != end {
                            residual = Some(other);
                            fused[add] = true;
                            end = add;
                        }
                    }
                    let mut act = Activation::Identity;
                    if let Some(a) =
                        only(end).and_then(|c| activation(&graph.nodes[c].op).map(|a| (c, a)))
                    {
                        act = a.1;
                        fused[a.0] = true;
                        end = a.0;
                    }
                    let wt: Vec<f32> = wt.iter().map(|&v| v as f32).collect();
                    let bf: Vec<f32> = b.iter().map(|&v| v as f32).collect();
                    let conv = match quant {
                        Some(q) => {
                            let scales = q.weights[id].as_ref().ok_or(ConfigError::MissingQuant)?;
                            // Folding scales each output channel, and so its weight scale.
                            let scales: Vec<f32> = scales
                                .iter()
                                .zip(&folded)
                                .map(|(&s, f)| (s as f64 * f.abs()) as f32)
                                .collect();
                            let (qi, qo) = (q.activations[node.inputs[0]], q.activations[end]);
                            Conv2d::new_int8(w, &wt, Some(&bf), act, &scales, qi, qo, config)
                        }
                        None => {
                            let key = LayerKey::of(w, &wt, config)?;
                            match tuned.get(&key).filter(|_| config.schedule.is_none()) {
                                Some(schedule) => {
                                    let layer = EngineConfig {
                                        schedule: Some(schedule),
                                        ..config.clone()
                                    };
                                    Conv2d::new(w, &wt, Some(&bf), act, &layer)
                                }
                                None => {
                                    if config.schedule.is_none() {
                                        default_scheduled.push(key);
                                    }
                                    Conv2d::new(w, &wt, Some(&bf), act, config)
                                }
                            }
                        }
                    }
                    .map_err(|e| e.context(format!("layer {}", node.name)))?;
                    (
                        end,
                        Step::Conv {
                            conv: Box::new(conv),
                            input: node.inputs[0],
                            residual,
                        },
                    )
                }
                Op::BatchNorm => {
                    let (scale, shift) = bn_affine(params)?;
                    let mut end = id;
                    let mut act = Activation::Identity;
                    if let Some((c, a)) =
                        only(id).and_then(|c| activation(&graph.nodes[c].op).map(|a| (c, a)))
                    {
                        act = a;
                        fused[c] = true;
                        end = c;
                    }
                    let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect();
                    (
                        end,
                        Step::Affine {
                            input: node.inputs[0],
                            scale: f(scale),
                            shift: f(shift),
                            act,
                        },
                    )
                }
                Op::Relu | Op::Relu6 | Op::Silu | Op::Sigmoid => (
                    id,
                    Step::Unary {
                        input: node.inputs[0],
                        act: activation(&node.op).expect("an activation"),
                    },
                ),
                Op::Add => {
                    let mut end = id;
                    let mut act = Activation::Identity;
                    if let Some((c, a)) =
                        only(id).and_then(|c| activation(&graph.nodes[c].op).map(|a| (c, a)))
                    {
                        act = a;
                        fused[c] = true;
                        end = c;
                    }
                    (
                        end,
                        Step::Add {
                            a: node.inputs[0],
                            b: node.inputs[1],
                            act,
                        },
                    )
                }
                Op::Mul => (
                    id,
                    Step::Mul {
                        a: node.inputs[0],
                        b: node.inputs[1],
                    },
                ),
                Op::MaxPool(p) | Op::AvgPool(p) => (
                    id,
                    Step::Pool {
                        input: node.inputs[0],
                        pool: *p,
                        max: matches!(node.op, Op::MaxPool(_)),
                    },
                ),
                Op::GlobalAvgPool => (
                    id,
                    Step::GlobalAvgPool {
                        input: node.inputs[0],
                    },
                ),
                Op::Concat => (
                    id,
                    Step::Concat {
                        inputs: node.inputs.clone(),
                    },
                ),
                Op::Flatten => (
                    id,
                    Step::Flatten {
                        input: node.inputs[0],
                    },
                ),
                Op::Input => anyhow::bail!("node {} is a second input", node.name),
            };
            steps.push((end, step));
        }
        let mut readers = vec![0; n];
        for (_, s) in &steps {
            for i in s.inputs() {
                readers[i] += 1;
            }
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(config.threads)
            .thread_name(|i| format!("dlas-engine-{i}"))
            .build()?;
        Ok(Engine {
            shapes: graph.nodes.iter().map(|n| n.shape).collect(),
            steps,
            readers,
            output: n - 1,
            layout: config.layout,
            dtype: config.dtype,
            quant: quant.map(|q| q.activations.clone()),
            pool,
            default_scheduled,
            arena: Arena::default(),
        })
    }

    /// The fp32 and fp16 layers that run their default schedule because
    /// neither the configuration nor the tuned table gave them one (int8
    /// layers have no schedule and are never listed).
    pub fn default_scheduled(&self) -> &[LayerKey] {
        &self.default_scheduled
    }

    /// The convolution and linear layers after fusion, in execution order.
    pub fn layers(&self) -> impl Iterator<Item = &Conv2d> {
        self.steps.iter().filter_map(|(_, s)| match s {
            Step::Conv { conv, .. } => Some(conv.as_ref()),
            _ => None,
        })
    }

    /// Runs a batch: `input` is (batch, c, h, w) NCHW whatever the engine's
    /// layout; the output is (batch, c, h, w) of the last node, NCHW.
    pub fn run(&self, input: &[f32], batch: usize) -> anyhow::Result<Vec<f32>> {
        let in_len: usize = self.shapes[0].iter().product();
        anyhow::ensure!(
            input.len() == batch * in_len,
            "input has {} values, a batch of {batch} needs {}",
            input.len(),
            batch * in_len
        );
        Ok(self.pool.install(|| self.run_in_pool(input, batch)))
    }

    fn run_in_pool(&self, input: &[f32], batch: usize) -> Vec<f32> {
        // A value that is a whole buffer.
        let whole = |v: Vec<f32>| {
            let len = v.len();
            (v, len)
        };
        let layout = self.layout;
        let mut values: Vec<Option<Stored>> = (0..self.shapes.len()).map(|_| None).collect();
        let mut left = self.readers.clone();
        let x = match layout {
            Layout::Nchw => {
                let mut x = self.arena.take(input.len());
                x[..input.len()].copy_from_slice(input);
                (x, input.len())
            }
            Layout::Nhwc => {
                let x = ops::relayout(input, self.shapes[0], Layout::Nchw, layout);
                let len = x.len();
                (x, len)
            }
        };
        let q = |i: NodeId| self.quant.as_ref().map(|q| q[i]);
        let store = |value: (Vec<f32>, usize), q: Option<ActivationQuant>| {
            let (stored, spent) = Stored::new(value, self.dtype, q);
            if let Some(buffer) = spent {
                self.arena.give(buffer);
            }
            stored
        };
        values[0] = Some(store(x, q(0)));
        for (out, step) in &self.steps {
            let inputs = step.inputs();
            if let Step::Conv {
                conv,
                input,
                residual,
            } = step
                && conv.is_int8()
            {
                let Some(Stored::I8(x, _)) = &values[*input] else {
                    unreachable!("int8 engines store activations as int8")
                };
                let r = residual.map(|r| values[r].as_ref().expect("computed").to_f32());
                let w = conv.workload();
                let mut y = vec![0i8; batch * w.out_len()];
                for (s, o) in y.chunks_mut(w.out_len()).enumerate() {
                    let xs = &x[s * w.in_len()..(s + 1) * w.in_len()];
                    let rs = r
                        .as_ref()
                        .map(|r| &r[s * w.out_len()..(s + 1) * w.out_len()]);
                    conv.run_sample_i8(xs, o, rs);
                }
                for &i in &inputs {
                    left[i] -= 1;
                    if left[i] == 0 {
                        values[i] = None;
                    }
                }
                values[*out] = Some(Stored::I8(
                    y,
                    q(*out).expect("int8 engines have quantisers"),
                ));
                continue;
            }
            let decoded: Vec<Cow<'_, [f32]>> = inputs
                .iter()
                .map(|&i| {
                    values[i]
                        .as_ref()
                        .expect("inputs run before their readers")
                        .to_f32()
                })
                .collect();
            let v = |i: NodeId| -> &[f32] {
                let at = inputs.iter().position(|&j| j == i).expect("a step input");
                &decoded[at]
            };
            let shape = |i: NodeId| self.shapes[i];
            let result = match step {
                Step::Conv {
                    conv,
                    input,
                    residual,
                } => {
                    let w = conv.workload();
                    let len = batch * w.out_len();
                    let mut y = self.arena.take(len);
                    for (s, o) in y[..len].chunks_mut(w.out_len()).enumerate() {
                        let x = &v(*input)[s * w.in_len()..(s + 1) * w.in_len()];
                        let r = residual.map(|r| &v(r)[s * w.out_len()..(s + 1) * w.out_len()]);
                        conv.run_sample(x, o, r);
                    }
                    (y, len)
                }
                Step::Affine {
                    input,
                    scale,
                    shift,
                    act,
                } => {
                    let mut y = v(*input).to_vec();
                    ops::affine(&mut y, scale, shift, *act, shape(*input), layout);
                    whole(y)
                }
                Step::Unary { input, act } => {
                    let mut y = v(*input).to_vec();
                    ops::unary(&mut y, *act);
                    whole(y)
                }
                Step::Add { a, b, act } => whole(ops::add(v(*a), v(*b), *act)),
                Step::Mul { a, b } => whole(ops::mul(v(*a), v(*b), shape(*a), layout)),
                Step::Pool { input, pool, max } => {
                    whole(ops::pool(v(*input), shape(*input), pool, *max, layout))
                }
                Step::GlobalAvgPool { input } => {
                    whole(ops::global_avg_pool(v(*input), shape(*input), layout))
                }
                Step::Concat { inputs } => {
                    let [_, h, w] = shape(inputs[0]);
                    let parts: Vec<(&[f32], usize)> =
                        inputs.iter().map(|&i| (v(i), shape(i)[0])).collect();
                    whole(ops::concat(&parts, batch, [h, w], layout))
                }
                Step::Flatten { input } => whole(ops::relayout(
                    v(*input),
                    shape(*input),
                    layout,
                    Layout::Nchw,
                )),
            };
            drop(decoded);
            for &i in &inputs {
                left[i] -= 1;
                if left[i] == 0
                    && let Some(Stored::F32(v, _)) = values[i].take()
                {
                    self.arena.give(v);
                }
            }
            values[*out] = Some(store(result, q(*out)));
        }
        let out = values[self.output].take().expect("the output is computed");
        let result = ops::relayout(
            &out.to_f32(),
            self.shapes[self.output],
            layout,
            Layout::Nchw,
        );
        if let Stored::F32(v, _) = out {
            self.arena.give(v);
        }
        result
    }
}
