//! What a tuned schedule applies to, and the table of tuned schedules an
//! engine is compiled with.
//!
//! The engine does not search: a tuner (the `dlas-tune` crate) measures
//! schedules per [`LayerKey`] and hands the winners back as a
//! [`ScheduleTable`]. The key is computed here, by the same code that picks
//! the layer's kernel in [`Conv2d::new`](crate::Conv2d::new), so the tuner
//! and the engine cannot disagree about which problem a schedule solves.

use crate::config::{ConfigError, DType, EngineConfig, FormatChoice};
use crate::conv::{kernel_algorithm, resolve_format};
use crate::schedule::Schedule;
use crate::workload::Workload;
use dlas_core::{Algorithm, Layout};
use dlas_zoo::{Graph, NodeId, Op};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

/// One layer's tuning problem: its shape and everything about how it is
/// computed except the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LayerKey {
    pub workload: Workload,
    /// The algorithm whose kernel runs the layer: the configured one, or
    /// direct for depthwise fp32 NCHW layers (see `Conv2d::new`).
    pub kernel: Algorithm,
    /// BSR block shape of sparse weights (1x1 is CSR); `None` is dense.
    pub blocks: Option<(usize, usize)>,
    pub layout: Layout,
    pub dtype: DType,
}

impl LayerKey {
    /// The key of a layer of shape `w` with (out, in / groups, k, k)
    /// weights `weights` under `config` (the weights matter only to
    /// `FormatChoice::Auto`, which measures their density).
    pub fn of(
        w: Workload,
        weights: &[f32],
        config: &EngineConfig,
    ) -> Result<LayerKey, ConfigError> {
        let blocks = resolve_format(config.format, &w, weights)?;
        Ok(LayerKey {
            workload: w,
            kernel: kernel_algorithm(config, &w, blocks)?,
            blocks,
            layout: config.layout,
            dtype: config.dtype,
        })
    }

    /// Whether the layer's kernel has schedule knobs: int8 GEMM has none.
    pub fn tunable(&self) -> bool {
        self.dtype != DType::I8
    }

    /// The format choice that reproduces this key's weight storage.
    pub fn format(&self) -> FormatChoice {
        match self.blocks {
            None => FormatChoice::Dense,
            Some((1, 1)) => FormatChoice::Csr,
            Some((rows, cols)) => FormatChoice::Bsr { rows, cols },
        }
    }
}

impl fmt::Display for LayerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let format = match self.blocks {
            None => "dense".to_string(),
            Some((1, 1)) => "csr".to_string(),
            Some((r, c)) => format!("bsr{r}x{c}"),
        };
        write!(
            f,
            "{} | {} {format} {} {:?}",
            self.workload, self.kernel, self.layout, self.dtype
        )
    }
}

/// Tuned schedules by layer; layers without an entry run their default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScheduleTable {
    schedules: HashMap<LayerKey, Schedule>,
}

impl ScheduleTable {
    pub fn insert(&mut self, key: LayerKey, schedule: Schedule) {
        self.schedules.insert(key, schedule);
    }

    pub fn get(&self, key: &LayerKey) -> Option<Schedule> {
        self.schedules.get(key).copied()
    }

    pub fn len(&self) -> usize {
        self.schedules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.schedules.is_empty()
    }
}

impl FromIterator<(LayerKey, Schedule)> for ScheduleTable {
    fn from_iter<I: IntoIterator<Item = (LayerKey, Schedule)>>(iter: I) -> Self {
        ScheduleTable {
            schedules: iter.into_iter().collect(),
        }
    }
}

/// The workload of convolution or linear node `id` of `graph`, `None` for
/// other operators. Linear layers are 1x1 convolutions on a 1x1 image.
pub fn workload_of(graph: &Graph, id: NodeId) -> Option<Workload> {
    let node = &graph.nodes[id];
    match &node.op {
        Op::Conv(c) => {
            let [_, h, w] = graph.nodes[node.inputs[0]].shape;
            Some(Workload::new(
                c.in_channels,
                c.out_channels,
                c.kernel,
                c.stride,
                c.padding,
                c.groups,
                h,
                w,
            ))
        }
        Op::Linear {
            in_features,
            out_features,
        } => Some(Workload::new(*in_features, *out_features, 1, 1, 0, 1, 1, 1)),
        _ => None,
    }
}
