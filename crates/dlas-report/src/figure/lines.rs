//! Lines of points against a level (or another x), one series per network,
//! the chosen point of each series ringed (Figure 3; the compiler study's
//! Figures 5 and 6). One legend row above the panels names every series;
//! a series keeps its colour across panels.

use super::layout::{Entry, Scale, Swatch};
use super::{COLOURS, DrawResult, LinePanel};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Every series name of `panels`, in order of first appearance: the
/// legend's entries and the index of each name's colour.
pub(super) fn names(panels: &[LinePanel]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for s in panels.iter().flat_map(|p| p.series.iter()) {
        if !names.contains(&s.name) {
            names.push(s.name.clone());
        }
    }
    names
}

pub(super) fn legend(names: &[String]) -> Vec<Entry> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| Entry {
            label: name.clone(),
            swatch: Swatch::Line(COLOURS[i % COLOURS.len()]),
        })
        .collect()
}

pub(super) fn draw<DB: DrawingBackend>(
    panel: &LinePanel,
    names: &[String],
    area: &DrawingArea<DB, Shift>,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let ys = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p[1]));
    let (low, high) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), y| {
        (l.min(y), h.max(y))
    });
    let (low, high) = if low.is_finite() {
        (low, high)
    } else {
        (0.0, 1.0)
    };
    let (low, high) = match panel.tie {
        Some(tie) if low > 0.0 && !panel.log_y => {
            let middle = (low * high).sqrt();
            (low.min(middle / tie), high.max(middle * tie))
        }
        _ => (low, high),
    };
    let [x0, x1] = panel.x_range.unwrap_or([0.0, 1.0]);
    let builder = |area| {
        let mut b = ChartBuilder::on(area);
        b.caption(&panel.title, ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60);
        b
    };
    // Log axes cannot show zero; linear ones get 5% of headroom.
    if panel.log_y && low > 0.0 {
        let range = (low / 1.3, high * 1.3);
        let (_, height) = area.dim_in_pixel();
        let ticks = Scale::Log.ticks(range, f64::from(height.saturating_sub(90).max(60)), 24.0);
        let mut chart = builder(area).build_cartesian_2d(
            x0..x1,
            (range.0..range.1)
                .log_scale()
                .with_key_points(ticks.clone()),
        )?;
        chart
            .configure_mesh()
            .x_desc(&panel.x_label)
            .y_desc(Scale::Log.describe(&panel.y_label))
            .y_labels(ticks.len())
            .y_label_formatter(&|y| Scale::Log.label(*y))
            .bold_line_style(BLACK.mix(0.15))
            .draw()?;
        draw_series(&mut chart, panel, names)?;
    } else {
        let pad = ((high - low) * 0.05).max(1e-9);
        let mut chart = builder(area).build_cartesian_2d(x0..x1, (low - pad)..(high + pad))?;
        chart
            .configure_mesh()
            .x_desc(&panel.x_label)
            .y_desc(&panel.y_label)
            .draw()?;
        draw_series(&mut chart, panel, names)?;
    }
    if !panel.note.is_empty() {
        let (width, height) = area.dim_in_pixel();
        for (i, line) in super::wrap(&panel.note, (width as usize - 140) / 7)
            .iter()
            .enumerate()
        {
            area.draw(&Text::new(
                line.clone(),
                (90, height as i32 / 2 + 16 * i as i32),
                ("sans-serif", 13).into_font().color(&BLACK),
            ))?;
        }
    }
    Ok(())
}

fn draw_series<'a, DB, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    panel: &LinePanel,
    names: &[String],
) -> DrawResult<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64>,
{
    for series in &panel.series {
        let index = names.iter().position(|n| *n == series.name).unwrap_or(0);
        let colour = COLOURS[index % COLOURS.len()];
        let points: Vec<(f64, f64)> = series.points.iter().map(|p| (p[0], p[1])).collect();
        chart.draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))?;
        chart.draw_series(
            points
                .iter()
                .map(|&(x, y)| Circle::new((x, y), 3, colour.filled())),
        )?;
        if let Some([x, y]) = series.marked {
            chart.draw_series([Circle::new((x, y), 7, BLACK.stroke_width(2))])?;
        }
    }
    Ok(())
}
