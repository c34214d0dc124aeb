//! The acceleration stack as six bands, top (problem) to bottom (hardware),
//! each listing the values a study perturbs (Figure 1).

use super::{DrawResult, StackLayer};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Height of one line of values, and the padding of a band.
pub(super) const LINE: u32 = 18;
pub(super) const PADDING: u32 = 26;
/// Characters per line of values before wrapping.
pub(super) const WRAP: usize = 100;
const LABEL_WIDTH: i32 = 300;

/// Light tints, one per layer, so neighbouring bands are told apart.
const TINTS: [RGBColor; 6] = [
    RGBColor(222, 235, 247),
    RGBColor(229, 245, 224),
    RGBColor(254, 230, 206),
    RGBColor(239, 237, 245),
    RGBColor(253, 224, 221),
    RGBColor(240, 240, 240),
];

/// The lines a layer's values take once wrapped.
pub(super) fn lines(layer: &StackLayer) -> Vec<String> {
    layer
        .values
        .iter()
        .flat_map(|v| super::wrap(v, WRAP))
        .collect()
}

/// The pixel height of a layer's band.
pub(super) fn band_height(layer: &StackLayer) -> u32 {
    PADDING + LINE * lines(layer).len().max(2) as u32
}

pub(super) fn draw<DB: DrawingBackend>(
    layers: &[StackLayer],
    area: &DrawingArea<DB, Shift>,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let (width, _) = area.dim_in_pixel();
    let right = width as i32 - 20;
    let mut top = 20i32;
    let name_font = ("sans-serif", 16).into_font().color(&BLACK);
    // The values start past the longest layer name, with a gap.
    let names: Vec<String> = layers
        .iter()
        .enumerate()
        .map(|(i, layer)| format!("{}  {}", i + 1, layer.name))
        .collect();
    let label_width = names
        .iter()
        .map(|n| 32 + super::layout::text_width(n, 16.0) as i32 + 16)
        .fold(LABEL_WIDTH, i32::max);
    let value_font = ("sans-serif", 13).into_font().color(&BLACK);
    for (i, layer) in layers.iter().enumerate() {
        let height = band_height(layer) as i32;
        area.draw(&Rectangle::new(
            [(20, top), (right, top + height - 6)],
            TINTS[i % TINTS.len()].filled(),
        ))?;
        area.draw(&Rectangle::new(
            [(20, top), (right, top + height - 6)],
            BLACK.stroke_width(1),
        ))?;
        area.draw(&Text::new(
            names[i].clone(),
            (32, top + 10),
            name_font.clone(),
        ))?;
        for (l, line) in lines(layer).iter().enumerate() {
            area.draw(&Text::new(
                line.clone(),
                (label_width, top + 12 + (l as u32 * LINE) as i32),
                value_font.clone(),
            ))?;
        }
        top += height;
    }
    Ok(())
}
