//! A grid of categorical cells with a legend (Figure 6).

use super::{COLOURS, DrawResult, Heatmap};
use plotters::coord::Shift;
use plotters::prelude::*;

/// The grid's top: below the column labels, drawn rotated upwards from
/// it, the longest of which sets it (at least 150 pixels).
pub(super) fn top(h: &Heatmap) -> u32 {
    let longest = h
        .columns
        .iter()
        .map(|c| super::layout::text_width(c, 12.0))
        .max()
        .unwrap_or(0);
    (longest + 24).max(150)
}

pub(super) fn draw<DB: DrawingBackend>(h: &Heatmap, area: &DrawingArea<DB, Shift>) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let (left, top, cell_w, cell_h) = (330i32, top(h) as i32, 110i32, 18i32);
    let text = ("sans-serif", 12).into_font().color(&BLACK);
    for (c, column) in h.columns.iter().enumerate() {
        let x = left + c as i32 * cell_w + cell_w / 2 - 6;
        area.draw(&Text::new(
            column.clone(),
            (x, top - 8),
            ("sans-serif", 12)
                .into_font()
                .transform(FontTransform::Rotate270)
                .color(&BLACK),
        ))?;
    }
    for (r, row) in h.rows.iter().enumerate() {
        let y = top + r as i32 * cell_h;
        area.draw(&Text::new(row.clone(), (10, y + 3), text.clone()))?;
        for (c, cell) in h.cells[r].iter().enumerate() {
            let x = left + c as i32 * cell_w;
            let fill = match cell {
                Some(v) => {
                    let i = h.categories.iter().position(|k| k == v).unwrap_or(0);
                    COLOURS[i % COLOURS.len()].mix(0.7).filled()
                }
                None => RGBColor(235, 235, 235).filled(),
            };
            area.draw(&Rectangle::new(
                [(x, y), (x + cell_w - 2, y + cell_h - 2)],
                fill,
            ))?;
            if let Some(v) = cell {
                area.draw(&Text::new(v.clone(), (x + 4, y + 2), text.clone()))?;
            }
        }
    }
    let legend_y = top + h.rows.len() as i32 * cell_h + 12;
    for (i, category) in h.categories.iter().enumerate() {
        let x = left + i as i32 * 150;
        area.draw(&Rectangle::new(
            [(x, legend_y), (x + 14, legend_y + 14)],
            COLOURS[i % COLOURS.len()].mix(0.7).filled(),
        ))?;
        area.draw(&Text::new(
            category.clone(),
            (x + 20, legend_y + 1),
            text.clone(),
        ))?;
    }
    Ok(())
}
