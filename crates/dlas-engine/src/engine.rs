//! Compiling a graph into a list of fused, lowered steps, and running it.
//!
//! Compiling runs two passes: graph fusion ([`crate::fusion`]: batch-norm
//! folding, residual and activation fusion) and lowering, which decides
//! each convolution's [`LayerKey`] and schedule once and packs its weights
//! for them.

use crate::config::{ConfigError, DType, EngineConfig};
use crate::conv::{Conv2d, Int8Scales};
use crate::fusion::{self, FusedConv, Plan, Step};
use crate::inverted::Tiles;
use crate::lowering::LayerKey;
use crate::tokens;
use crate::tuning::ScheduleTable;
use crate::{imported, ops};
use dlas_core::Layout;
use dlas_zoo::quant::{ActivationQuant, QuantParams};
use dlas_zoo::weights::Weights;
use dlas_zoo::{Graph, NodeId, Shape};
use half::f16;
use half::slice::HalfFloatSliceExt;
use std::borrow::Cow;

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
    steps: Plan<Box<Conv2d>>,
    /// How many steps read each node, to free values after their last use.
    readers: Vec<usize>,
    output: NodeId,
    layout: Layout,
    dtype: DType,
    /// int8 only: the quantiser of every node's output.
    quant: Option<Vec<ActivationQuant>>,
    pool: rayon::ThreadPool,
    default_scheduled: Vec<LayerKey>,
    /// Per step, the tiles it runs in together with the next step, where
    /// the two are an expansion and the depthwise layer that alone reads
    /// it ([`crate::inverted`]); the next step is then skipped.
    fused: Vec<Option<Tiles>>,
    /// f32 activation buffers of earlier runs, for later runs to reuse.
    arena: Arena,
}

/// One step of a profiled run ([`Engine::profile`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StepTime {
    /// What ran: a convolution's kernel class, kernel size and stride
    /// (`direct 1x1`, `depthwise 3x3 s2`, an expansion and its depthwise
    /// layer joined by `+`), else the operator (`add`, `global average pool`).
    pub kind: String,
    /// The step's first input and its output, per sample (c, h, w): a
    /// fused pair's input is its expansion's, its output its depthwise
    /// layer's.
    pub input: Shape,
    pub output: Shape,
    pub seconds: f64,
}

/// Buffers kept across runs, so a run's convolutions write into memory
/// that is already mapped and sized instead of allocating and zeroing
/// fresh pages per layer (on MobileNetV2 at 224x224 that was about a tenth
/// of the run). Buffers keep their full length (a value is its first `len`
/// entries, `Stored::F32`), so reuse never zeroes them again. A buffer's
/// contents are whatever its last user left: only convolutions, the
/// transformer steps (`Engine::write`) and the input copy take from the
/// arena, and each writes every value it stores.
///
/// The other steps allocate their outputs, which the arena receives when
/// they are freed, so it keeps at most `limit` buffers (the most values a
/// run holds at once), dropping the smallest beyond that. Unbounded, it
/// grew by every such output of every run: about 90 MB a run on
/// EfficientNet-B0 (its SiLU and squeeze-excitation steps), until a
/// campaign's process was killed for memory.
#[derive(Default)]
struct Arena {
    kept: std::sync::Mutex<Vec<Vec<f32>>>,
    limit: usize,
}

impl Arena {
    /// A buffer of at least `len` values (unspecified, not uninitialised):
    /// the smallest kept one that is long enough, else the longest,
    /// extended.
    fn take(&self, len: usize) -> Vec<f32> {
        let mut kept = self.kept.lock().expect("the arena's users do not panic");
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
        let mut kept = self.kept.lock().expect("the arena's users do not panic");
        kept.push(v);
        if kept.len() > self.limit
            && let Some(smallest) = (0..kept.len()).min_by_key(|&i| kept[i].len())
        {
            kept.swap_remove(smallest);
        }
    }

    /// Values kept, for the tests.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.kept
            .lock()
            .expect("the arena's users do not panic")
            .len()
    }
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
        if let Some(s) = config.schedule
            && s.algorithm() != config.algorithm
        {
            return Err(ConfigError::ScheduleMismatch {
                given: s.algorithm(),
                algorithm: config.algorithm,
            }
            .into());
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
        let mut default_scheduled = Vec::new();
        let mut steps = Vec::new();
        for (out, step) in fusion::fuse(graph, weights)? {
            let step = step.map_conv(|conv, input| {
                let name = &graph.nodes[conv.node].name;
                let lowered = match quant {
                    Some(q) => lower_int8(conv, config, q, (input, out)),
                    None => lower(conv, config, tuned, &mut default_scheduled),
                };
                lowered
                    .map(Box::new)
                    .map_err(|e| e.context(format!("layer {name}")))
            })?;
            steps.push((out, step));
        }
        let mut readers = vec![0; n];
        for (_, s) in &steps {
            for i in s.inputs() {
                readers[i] += 1;
            }
        }
        let fused = (0..steps.len())
            .map(|i| match (&steps[i], steps.get(i + 1)) {
                (
                    (
                        made,
                        Step::Conv {
                            conv,
                            residual: None,
                            ..
                        },
                    ),
                    Some((
                        _,
                        Step::Conv {
                            conv: next, input, ..
                        },
                    )),
                ) if input == made && readers[*made] == 1 => conv.fuses_with(next, config.threads),
                _ => None,
            })
            .collect();
        let arena = Arena {
            kept: Default::default(),
            limit: peak_live(&steps, &readers),
        };
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
            fused,
            arena,
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
        self.check_input(input, batch)?;
        Ok(crate::awake::run_awake(&self.pool, || {
            self.run_in_pool(input, batch, None)
        }))
    }

    /// That `input` is a batch of `batch` of the network's inputs.
    fn check_input(&self, input: &[f32], batch: usize) -> anyhow::Result<()> {
        let in_len: usize = self.shapes[0].iter().product();
        anyhow::ensure!(
            input.len() == batch * in_len,
            "input has {} values, a batch of {batch} needs {}",
            input.len(),
            batch * in_len
        );
        Ok(())
    }

    /// [`Engine::run`], each step timed: the output and, per step that
    /// ran, its kind, shapes and seconds (a fused expansion and
    /// depthwise layer are one step). What `dlas bench profile` reads to
    /// say where a network's time goes; the clock is read twice a step,
    /// which on the smallest steps (a few µs) is a few percent of theirs.
    pub fn profile(
        &self,
        input: &[f32],
        batch: usize,
    ) -> anyhow::Result<(Vec<f32>, Vec<StepTime>)> {
        self.check_input(input, batch)?;
        let mut clock = Vec::with_capacity(self.steps.len());
        let output = crate::awake::run_awake(&self.pool, || {
            self.run_in_pool(input, batch, Some(&mut clock))
        });
        let times = clock
            .into_iter()
            .map(|(i, seconds)| StepTime {
                kind: self.step_kind(i),
                input: self.shapes[self.steps[i].1.inputs()[0]],
                output: self.shapes[self.steps[i + usize::from(self.fused[i].is_some())].0],
                seconds,
            })
            .collect();
        Ok((output, times))
    }

    /// What step `i` runs, as a profile names it: a convolution by its
    /// kernel class, kernel size and stride, other steps by their operator.
    fn step_kind(&self, i: usize) -> String {
        let conv = |c: &Conv2d| {
            let w = c.workload();
            let stride = if w.stride > 1 {
                format!(" s{}", w.stride)
            } else {
                String::new()
            };
            format!(
                "{} {}x{}{stride}",
                c.key().class.kernel_name(),
                w.kernel,
                w.kernel
            )
        };
        match &self.steps[i].1 {
            Step::Conv { conv: c, .. } => match (self.fused[i], self.steps.get(i + 1)) {
                (Some(_), Some((_, Step::Conv { conv: next, .. }))) => {
                    format!("{} + {}", conv(c), conv(next))
                }
                _ => conv(c),
            },
            Step::Affine { .. } => "affine".into(),
            Step::Unary { act, .. } => format!("{act:?}").to_lowercase(),
            Step::Add { .. } => "add".into(),
            Step::Mul { .. } => "mul".into(),
            Step::Pool { max: true, .. } => "max pool".into(),
            Step::Pool { max: false, .. } => "average pool".into(),
            Step::GlobalAvgPool { .. } => "global average pool".into(),
            Step::Concat { .. } => "concat".into(),
            Step::Flatten { .. } => "flatten".into(),
            Step::LayerNorm { .. } => "layer norm".into(),
            Step::Gelu { .. } => "gelu".into(),
            Step::Attention { .. } => "attention".into(),
            Step::ClassToken { .. } => "class token".into(),
            Step::PositionEmbedding { .. } => "position embedding".into(),
            Step::FirstToken { .. } => "first token".into(),
            Step::SpaceToDepth { .. } => "space to depth".into(),
            Step::Imported { op, .. } => format!("{op:?}").to_lowercase(),
        }
    }

    /// The value of node `node` for a batch, from an arena buffer that
    /// `f` must write in full.
    fn write(&self, node: NodeId, batch: usize, f: impl FnOnce(&mut [f32])) -> (Vec<f32>, usize) {
        let len = batch * self.shapes[node].iter().product::<usize>();
        let mut y = self.arena.take(len);
        f(&mut y[..len]);
        (y, len)
    }

    /// One run; with `clock`, each step's (index, seconds) is pushed to it.
    fn run_in_pool(
        &self,
        input: &[f32],
        batch: usize,
        mut clock: Option<&mut Vec<(usize, f64)>>,
    ) -> Vec<f32> {
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
            Layout::Nhwc | Layout::Nchw16c => {
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
        let mut skip = false;
        for (i, (out, step)) in self.steps.iter().enumerate() {
            if std::mem::take(&mut skip) {
                continue;
            }
            let started = clock.is_some().then(std::time::Instant::now);
            let tick = |clock: &mut Option<&mut Vec<(usize, f64)>>| {
                if let (Some(clock), Some(t)) = (clock.as_deref_mut(), started) {
                    clock.push((i, t.elapsed().as_secs_f64()));
                }
            };
            let mut inputs = step.inputs();
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
                tick(&mut clock);
                continue;
            }
            // A fused pair: this step and the next, whose output it writes
            // (the next's residual its input too).
            let (out, pair) = match (self.fused[i], &self.steps.get(i + 1)) {
                (Some(tiles), Some((last, Step::Conv { conv, residual, .. }))) => {
                    skip = true;
                    inputs.extend(*residual);
                    (last, Some((tiles, conv, *residual)))
                }
                _ => (out, None),
            };
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
                Step::Conv { conv, input, .. } if pair.is_some() => {
                    let (tiles, next, residual) = pair.expect("a pair");
                    let (il, ol) = (conv.workload().in_len(), next.workload().out_len());
                    let len = batch * ol;
                    let mut y = self.arena.take(len);
                    for (s, o) in y[..len].chunks_mut(ol).enumerate() {
                        let x = &v(*input)[s * il..(s + 1) * il];
                        let r = residual.map(|r| &v(r)[s * ol..(s + 1) * ol]);
                        conv.run_fused_sample((next, tiles), x, o, r);
                    }
                    (y, len)
                }
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
                Step::Mul { a, b } => self.write(*out, batch, |y| {
                    ops::mul(v(*a), v(*b), shape(*a), layout, y)
                }),
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
                Step::LayerNorm { input, norm } => self.write(*out, batch, |y| {
                    norm.run(v(*input), y, shape(*input), layout)
                }),
                Step::Gelu { input } => self.write(*out, batch, |y| ops::gelu(v(*input), y)),
                Step::Attention { input, attention } => {
                    self.write(*out, batch, |y| attention.run(v(*input), y, layout))
                }
                Step::ClassToken { input, token } => self.write(*out, batch, |y| {
                    tokens::class_token(v(*input), y, shape(*input), token, layout)
                }),
                Step::PositionEmbedding { input, embedding } => self.write(*out, batch, |y| {
                    tokens::position_embedding(v(*input), y, shape(*input), embedding, layout)
                }),
                Step::FirstToken { input } => self.write(*out, batch, |y| {
                    tokens::first_token(v(*input), y, shape(*input), layout)
                }),
                Step::SpaceToDepth { input } => self.write(*out, batch, |y| {
                    tokens::space_to_depth(v(*input), y, shape(*input), layout)
                }),
                Step::Imported { input, op } => {
                    whole(imported::run(op, v(*input), shape(*input), layout))
                }
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
            tick(&mut clock);
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

/// Lowers an fp32 or fp16 layer: its key under `config`, and the schedule
/// `config` gives the layers of its algorithm, else the tuned one of its
/// key, else its default (then the key is listed in `default_scheduled`).
/// A depthwise layer that runs as direct under another algorithm keeps its
/// default when `config` gives a schedule.
fn lower(
    conv: FusedConv,
    config: &EngineConfig,
    tuned: &ScheduleTable,
    default_scheduled: &mut Vec<LayerKey>,
) -> anyhow::Result<Conv2d> {
    let key = LayerKey::of(conv.workload, &conv.weights, config)?;
    let schedule = match (config.schedule, tuned.get(&key)) {
        (Some(s), _) if key.drives(&s) => s,
        (Some(_), _) => key.default_schedule(config.threads),
        (None, Some(s)) => s,
        (None, None) => {
            default_scheduled.push(key);
            key.default_schedule(config.threads)
        }
    };
    Conv2d::new(key, schedule, &conv.weights, Some(&conv.bias), conv.act)
}

/// Lowers an int8 layer reading node `input` and writing node `output`
/// with the quantisers of `q`.
fn lower_int8(
    conv: FusedConv,
    config: &EngineConfig,
    q: &QuantParams,
    (input, output): (NodeId, NodeId),
) -> anyhow::Result<Conv2d> {
    let key = LayerKey::of(conv.workload, &conv.weights, config)?;
    let scales = q.weights[conv.node]
        .as_ref()
        .ok_or(ConfigError::MissingQuant)?;
    // Folding scales each output channel, and so its weight scale.
    let scales: Vec<f32> = scales
        .iter()
        .zip(&conv.folded)
        .map(|(&s, f)| (s as f64 * f.abs()) as f32)
        .collect();
    let scales = Int8Scales {
        weights: &scales,
        input: q.activations[input],
        output: q.activations[output],
    };
    Conv2d::new_int8(key, &conv.weights, Some(&conv.bias), conv.act, scales)
}

/// The most values a run of `steps` holds at once (the input, each step's
/// output until its last reader has run), plus the run's output buffer:
/// how many buffers the arena needs to serve every run from reuse.
fn peak_live<C>(steps: &Plan<C>, readers: &[usize]) -> usize {
    let mut left = readers.to_vec();
    let (mut live, mut peak) = (1, 1);
    for (_, step) in steps {
        live += 1;
        peak = peak.max(live);
        for i in step.inputs() {
            left[i] -= 1;
            if left[i] == 0 {
                live -= 1;
            }
        }
    }
    peak + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlas_core::Dataset;
    use dlas_zoo::{GraphBuilder, Op};

    /// Two inverted-residual heads on a 224x224 input (a 1x1 expansion to
    /// `big` channels and a depthwise layer, then one to `small`),
    /// concatenated and classified; its weights and a batch-2 input.
    fn two_heads(big: usize, small: usize, seed: u64) -> (Graph, Weights, Vec<f32>) {
        let mut g = GraphBuilder::new("heads", Dataset::Imagenet);
        let x = g.input();
        let e = g.conv_bn(x, big, 1, 1, 1, Some(Op::Relu6));
        let first = g.conv_bn(e, big, 3, 2, big, Some(Op::Relu6));
        let e = g.conv_bn(x, small, 1, 1, 1, Some(Op::Relu6));
        let second = g.conv_bn(e, small, 3, 2, small, Some(Op::Relu6));
        let both = g.concat(&[first, second]);
        let gap = g.global_avg_pool(both);
        let f = g.flatten(gap);
        g.linear(f, 10);
        let graph = g.finish();
        let weights = dlas_zoo::weights::generate(&graph, seed);
        let input = dlas_zoo::weights::input(&graph, seed, 2);
        (graph, weights, input)
    }

    /// The output channels of each step `engine` runs fused with the next.
    fn fused_outputs(engine: &Engine) -> Vec<usize> {
        (0..engine.steps.len())
            .filter(|&i| engine.fused[i].is_some())
            .map(|i| {
                let Step::Conv { conv, .. } = &engine.steps[i].1 else {
                    panic!("a fused step is a convolution")
                };
                conv.workload().out_channels
            })
            .collect()
    }

    /// The relative L2 distance of `a` from `b`.
    fn relative_l2(a: &[f32], b: &[f32]) -> f32 {
        let err: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
        let norm: f32 = b.iter().map(|y| y * y).sum();
        (err / norm).sqrt()
    }

    /// Two inverted-residual heads expanding to 8 channels (1.6 MB) and to
    /// 4 (0.8 MB): the GEMM engine fuses the first expansion with its
    /// depthwise layer only, and computes what the direct engine, which
    /// fuses nothing, computes.
    #[test]
    fn expansions_to_large_maps_run_fused_with_their_depthwise_layer() {
        use crate::algorithm::KernelAlgorithm;
        let (graph, weights, input) = two_heads(8, 4, 5);
        let engine = |algorithm| {
            let config = EngineConfig {
                algorithm,
                ..EngineConfig::default()
            };
            Engine::compile(&graph, &weights, &config).unwrap()
        };
        let (gemm, direct) = (
            engine(KernelAlgorithm::Gemm),
            engine(KernelAlgorithm::Direct),
        );
        assert_eq!(fused_outputs(&gemm), [8]);
        assert!(direct.fused.iter().all(Option::is_none));
        let (a, b) = (gemm.run(&input, 2).unwrap(), direct.run(&input, 2).unwrap());
        let l2 = relative_l2(&a, &b);
        assert!(l2 < 1e-5, "relative L2 {l2}");
    }

    /// In NCHW16c an expansion to whole 16-channel blocks and a large map
    /// (32 channels of 224x224, 6.4 MB) runs fused with its depthwise
    /// layer, one of 24 channels (not whole blocks) does not, and the
    /// network computes what the NCHW direct engine computes.
    #[test]
    fn blocked_expansions_of_whole_blocks_run_fused() {
        use crate::algorithm::KernelAlgorithm;
        let (graph, weights, input) = two_heads(32, 24, 7);
        let engine = |algorithm, layout| {
            let config = EngineConfig {
                algorithm,
                layout,
                ..EngineConfig::default()
            };
            Engine::compile(&graph, &weights, &config).unwrap()
        };
        let blocked = engine(KernelAlgorithm::Direct, Layout::Nchw16c);
        let planar = engine(KernelAlgorithm::Direct, Layout::Nchw);
        assert_eq!(fused_outputs(&blocked), [32]);
        let (a, b) = (
            blocked.run(&input, 2).unwrap(),
            planar.run(&input, 2).unwrap(),
        );
        let l2 = relative_l2(&a, &b);
        assert!(l2 < 1e-5, "relative L2 {l2}");
    }

    /// A profiled run computes what a run does and times each step that
    /// ran once: a fused expansion and its depthwise layer as one step
    /// named for both, with the depthwise layer's output.
    #[test]
    fn a_profiled_run_times_each_step_once() {
        use crate::algorithm::KernelAlgorithm;
        let (graph, weights, input) = two_heads(32, 24, 7);
        let config = EngineConfig {
            algorithm: KernelAlgorithm::Direct,
            layout: Layout::Nchw16c,
            ..EngineConfig::default()
        };
        let engine = Engine::compile(&graph, &weights, &config).unwrap();
        let (output, steps) = engine.profile(&input, 2).unwrap();
        assert_eq!(output, engine.run(&input, 2).unwrap());
        let fused = engine.fused.iter().filter(|f| f.is_some()).count();
        assert_eq!(fused, 1);
        assert_eq!(steps.len(), engine.steps.len() - fused);
        let kinds: Vec<&str> = steps.iter().map(|s| s.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "direct 1x1 + depthwise 3x3 s2",
                "direct 1x1",
                "depthwise 3x3 s2",
                "concat",
                "global average pool",
                "flatten",
                "direct 1x1"
            ]
        );
        assert_eq!(steps[0].input, [3, 224, 224]);
        assert_eq!(steps[0].output, [32, 112, 112]);
        assert!(steps.iter().all(|s| s.seconds > 0.0), "{steps:?}");
        assert!(engine.profile(&input[1..], 2).is_err());
    }

    /// Squeeze-and-excitation and SiLU steps allocate their outputs; the
    /// arena receives them when freed. Over many runs it must stay at its
    /// limit rather than keep every run's buffers.
    #[test]
    fn the_arena_stays_bounded_over_runs() {
        let mut g = GraphBuilder::new("se", Dataset::Cifar10);
        let x = g.input();
        let e = g.conv_bn(x, 16, 3, 1, 1, Some(Op::Silu));
        let s = g.global_avg_pool(e);
        let s = g.conv(s, 4, 1, 1, 0, 1, true);
        let s = g.unary(Op::Silu, s);
        let s = g.conv(s, 16, 1, 1, 0, 1, true);
        let s = g.unary(Op::Sigmoid, s);
        let m = g.mul(e, s);
        let gap = g.global_avg_pool(m);
        let f = g.flatten(gap);
        g.linear(f, 10);
        let graph = g.finish();
        let weights = dlas_zoo::weights::generate(&graph, 3);
        let input = dlas_zoo::weights::input(&graph, 3, 1);
        let engine = Engine::compile(&graph, &weights, &EngineConfig::default()).unwrap();
        let first = engine.run(&input, 1).unwrap();
        for _ in 0..50 {
            assert_eq!(engine.run(&input, 1).unwrap(), first);
        }
        assert!(engine.arena.limit < engine.steps.len() + 2);
        assert!(
            engine.arena.len() <= engine.arena.limit,
            "{} buffers kept, limit {}",
            engine.arena.len(),
            engine.arena.limit
        );
    }
}
