//! Real-valued matrices as heat maps on one diverging colour scale, exact
//! zeros in grey so pruned weights stand out from small ones (Figure 2).

use super::{DrawResult, MatrixPanel};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Pixels per cell, and the space around and above each matrix.
pub(super) const CELL: u32 = 10;
pub(super) const MARGIN: u32 = 40;
pub(super) const CAPTION: u32 = 50;
const ZERO: RGBColor = RGBColor(200, 200, 200);

/// Blue for negative, white for zero, red for positive; `t` in [-1, 1].
fn colour(t: f64) -> RGBColor {
    let t = t.clamp(-1.0, 1.0);
    let (end, t) = if t < 0.0 {
        ((59.0, 76.0, 192.0), -t)
    } else {
        ((180.0, 4.0, 38.0), t)
    };
    let mix = |e: f64| (255.0 + (e - 255.0) * t).round() as u8;
    RGBColor(mix(end.0), mix(end.1), mix(end.2))
}

/// The pixel size of one panel.
pub(super) fn panel_size(panel: &MatrixPanel) -> (u32, u32) {
    (
        2 * MARGIN + CELL * panel.columns as u32,
        CAPTION + MARGIN + CELL * panel.rows as u32,
    )
}

pub(super) fn draw<DB: DrawingBackend>(
    panel: &MatrixPanel,
    area: &DrawingArea<DB, Shift>,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let text = ("sans-serif", 13).into_font().color(&BLACK);
    area.draw(&Text::new(
        panel.title.clone(),
        (MARGIN as i32, 8),
        ("sans-serif", 15).into_font().color(&BLACK),
    ))?;
    area.draw(&Text::new(
        panel.note.clone(),
        (MARGIN as i32, 28),
        text.clone(),
    ))?;
    let (left, top, cell) = (MARGIN as i32, CAPTION as i32, CELL as i32);
    for r in 0..panel.rows {
        for c in 0..panel.columns {
            let v = panel.values[r * panel.columns + c];
            let fill = if v == 0.0 {
                ZERO
            } else {
                colour(v / panel.scale)
            };
            let (x, y) = (left + c as i32 * cell, top + r as i32 * cell);
            area.draw(&Rectangle::new(
                [(x, y), (x + cell, y + cell)],
                fill.filled(),
            ))?;
        }
    }
    area.draw(&Rectangle::new(
        [
            (left, top),
            (
                left + cell * panel.columns as i32,
                top + cell * panel.rows as i32,
            ),
        ],
        BLACK.stroke_width(1),
    ))?;
    Ok(())
}

/// The colour scale under the panels: negative, zero (pruned), positive.
pub(super) fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    y: i32,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let text = ("sans-serif", 13).into_font().color(&BLACK);
    let left = MARGIN as i32;
    for i in 0..=40 {
        let t = i as f64 / 20.0 - 1.0;
        let x = left + 90 + i * 6;
        area.draw(&Rectangle::new(
            [(x, y), (x + 6, y + 14)],
            colour(t).filled(),
        ))?;
    }
    area.draw(&Text::new("-max |w|", (left, y), text.clone()))?;
    area.draw(&Text::new(
        "+max |w|",
        (left + 90 + 41 * 6 + 8, y),
        text.clone(),
    ))?;
    let zero_x = left + 480;
    area.draw(&Rectangle::new(
        [(zero_x, y), (zero_x + 14, y + 14)],
        ZERO.filled(),
    ))?;
    area.draw(&Text::new("exactly zero (pruned)", (zero_x + 20, y), text))?;
    Ok(())
}
