//! The table of tuned schedules an engine is compiled with.
//!
//! The engine does not search: a tuner (the `dlas-tune` crate) measures
//! schedules per [`LayerKey`] and hands the winners back as a
//! [`ScheduleTable`], which [`Engine::compile_with`](crate::Engine::compile_with)
//! looks each layer's key up in.

use crate::lowering::LayerKey;
use crate::schedule::Schedule;
use std::collections::HashMap;

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
