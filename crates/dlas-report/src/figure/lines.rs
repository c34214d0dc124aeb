//! Lines of points against a level (or another x), one series per network,
//! the chosen point of each series ringed (Figure 3; the compiler study's
//! Figures 5 and 6). One legend row above the panels names every series;
//! a series keeps its colour, marker shape and dash pattern across panels,
//! so that lines which coincide can still be told apart.

use super::layout::{Entry, Scale, Swatch};
use super::{DrawResult, LinePanel, marks};
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
        .map(|(i, name)| {
            let (colour, shape, dash) = marks::style(i);
            Entry {
                label: name.clone(),
                swatch: Swatch::Line {
                    colour,
                    shape,
                    dash,
                },
            }
        })
        .collect()
}

/// How many x ticks a panel asks for: one per power of two on a log2
/// axis (on an integer span plotters' nice steps are then the integers),
/// otherwise plotters' default.
fn x_tick_count(panel: &LinePanel, [x0, x1]: [f64; 2]) -> usize {
    if panel.x_powers_of_two {
        (x1.floor() - x0.ceil()) as usize + 1
    } else {
        10
    }
}

/// An x tick's label: the count itself on a log2 axis (3 -> "8"), and
/// none at a fractional power, should plotters put a tick there.
fn x_label(panel: &LinePanel, x: f64) -> String {
    if !panel.x_powers_of_two {
        return Scale::Linear.label(x);
    }
    if (x - x.round()).abs() < 1e-9 {
        format!("{}", 2f64.powi(x.round() as i32))
    } else {
        String::new()
    }
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
    let (low, high) = match panel.y_range {
        Some([l, h]) => (l, h),
        None if low.is_finite() => (low, high),
        None => (0.0, 1.0),
    };
    let (low, high) = match panel.tie {
        Some(tie) if low > 0.0 && !panel.log_y => {
            let middle = (low * high).sqrt();
            (low.min(middle / tie), high.max(middle * tie))
        }
        _ => (low, high),
    };
    let [x0, x1] = panel.x_range.unwrap_or([0.0, 1.0]);
    let (width, height) = area.dim_in_pixel();
    let x_ticks = x_tick_count(panel, [x0, x1]);
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
        let y_ticks = Scale::Log.ticks(range, f64::from(height.saturating_sub(90).max(60)), 24.0);
        let mut chart = builder(area).build_cartesian_2d(
            x0..x1,
            (range.0..range.1)
                .log_scale()
                .with_key_points(y_ticks.clone()),
        )?;
        chart
            .configure_mesh()
            .x_desc(&panel.x_label)
            .x_labels(x_ticks)
            .x_label_formatter(&|x| x_label(panel, *x))
            .y_desc(Scale::Log.describe(&panel.y_label))
            .y_labels(y_ticks.len())
            .y_label_formatter(&|y| Scale::Log.label(*y))
            .bold_line_style(BLACK.mix(0.15))
            .draw()?;
        draw_series(&chart, area, panel, names)?;
    } else {
        let pad = ((high - low) * 0.05).max(1e-9);
        let mut chart = builder(area).build_cartesian_2d(x0..x1, (low - pad)..(high + pad))?;
        chart
            .configure_mesh()
            .x_desc(&panel.x_label)
            .x_labels(x_ticks)
            .x_label_formatter(&|x| x_label(panel, *x))
            .y_desc(&panel.y_label)
            .bold_line_style(BLACK.mix(0.15))
            .draw()?;
        draw_series(&chart, area, panel, names)?;
    }
    if !panel.note.is_empty() {
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

/// Draws every series' line, then every series' markers (outlines, so a
/// marker under another of a different shape still shows), then the rings
/// of the chosen points, all in `area`'s pixels.
fn draw_series<DB, X, Y>(
    chart: &ChartContext<'_, DB, Cartesian2d<X, Y>>,
    area: &DrawingArea<DB, Shift>,
    panel: &LinePanel,
    names: &[String],
) -> DrawResult<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let base = area.get_base_pixel();
    let pixel = |x: f64, y: f64| {
        let (px, py) = chart.backend_coord(&(x, y));
        (px - base.0, py - base.1)
    };
    let styled: Vec<_> = panel
        .series
        .iter()
        .map(|series| {
            let index = names.iter().position(|n| *n == series.name).unwrap_or(0);
            let points: Vec<(i32, i32)> = series.points.iter().map(|p| pixel(p[0], p[1])).collect();
            (series, marks::style(index), points)
        })
        .collect();
    for (_, (colour, _, dash), points) in &styled {
        if points.len() > 1 {
            marks::draw_line(area, points, *colour, *dash)?;
        }
    }
    for (_, (colour, shape, _), points) in &styled {
        for &p in points {
            marks::draw(area, p, *shape, *colour, false, 4)?;
        }
    }
    for (series, _, _) in &styled {
        if let Some([x, y]) = series.marked {
            area.draw(&Circle::new(pixel(x, y), 8, BLACK.stroke_width(2)))?;
        }
    }
    Ok(())
}
