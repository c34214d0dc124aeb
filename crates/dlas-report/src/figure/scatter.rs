//! Labelled points on logarithmic axes, optionally with y = x (Figure 7;
//! Figure 9). The legend sits in a row above the plot. Each series has its
//! own colour and marker shape; measured points are filled, modelled ones
//! hollow.

use super::layout::{self, Entry, Scale, Swatch};
use super::{DrawResult, ScatterPanel, marks};
use plotters::coord::Shift;
use plotters::prelude::*;

pub(super) fn draw<DB: DrawingBackend>(
    panel: &ScatterPanel,
    y_label: &str,
    area: &DrawingArea<DB, Shift>,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let all = panel.series.iter().flat_map(|s| s.points.iter());
    let (low, high) = all.fold((f64::INFINITY, 0f64), |(l, h), p| {
        (l.min(p.x).min(p.y), h.max(p.x).max(p.y))
    });
    let (low, high) = if low.is_finite() && low > 0.0 {
        (low / 1.5, high * 1.5)
    } else {
        (0.1, 10.0)
    };
    let (width, _) = area.dim_in_pixel();
    let caption = layout::fit(&panel.title, &[16.0, 14.0, 12.0], width - 16);
    layout::draw_centred(area, &caption, 8, caption.0 as i32 + 4)?;
    let caption_height = 8 + (caption.0 as i32 + 4) * caption.1.len() as i32;
    let band_style = BLACK.mix(0.3);
    let mut entries = Vec::new();
    if let Some(label) = &panel.diagonal {
        entries.push(Entry {
            label: label.clone(),
            swatch: Swatch::Rule(BLACK.mix(0.5)),
        });
        if let Some(band) = panel.band {
            entries.push(Entry {
                label: format!("±{:.0}%", band * 100.0),
                swatch: Swatch::Rule(band_style),
            });
        }
    }
    for (si, series) in panel.series.iter().enumerate() {
        let (colour, shape, _) = marks::style(si);
        entries.push(Entry {
            label: series.name.clone(),
            swatch: Swatch::Marker {
                colour,
                shape,
                filled: !series.modelled,
            },
        });
    }
    layout::draw_legend(area, &entries, (78, caption_height), width - 94)?;
    let legend_height = layout::legend_height(&entries, width - 94) as i32;
    let (_, plot) = area.split_vertically(caption_height + legend_height + 4);
    // Ticks on both sides of 1 where the points are, as many as fit.
    let (plot_width, plot_height) = plot.dim_in_pixel();
    let x_ticks = Scale::Log.ticks((low, high), f64::from(plot_width - 86), 48.0);
    let y_ticks = Scale::Log.ticks((low, high), f64::from(plot_height - 66), 24.0);
    let mut chart = ChartBuilder::on(&plot)
        .margin(8)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (low..high).log_scale().with_key_points(x_ticks.clone()),
            (low..high).log_scale().with_key_points(y_ticks.clone()),
        )?;
    chart
        .configure_mesh()
        .x_labels(x_ticks.len())
        .y_labels(y_ticks.len())
        .x_desc(Scale::Log.describe(&panel.x_label))
        .y_desc(Scale::Log.describe(y_label))
        .x_label_formatter(&|x| Scale::Log.label(*x))
        .y_label_formatter(&|y| Scale::Log.label(*y))
        .bold_line_style(BLACK.mix(0.15))
        .draw()?;
    if panel.diagonal.is_some() {
        chart.draw_series(LineSeries::new([(low, low), (high, high)], BLACK.mix(0.5)))?;
        if let Some(band) = panel.band {
            // Each line only where it lies inside the square: plotters
            // clamps an endpoint outside the plot to its edge, which on log
            // axes would tilt the line.
            for factor in [1.0 + band, 1.0 - band] {
                let (from, to) = (low.max(low / factor), high.min(high / factor));
                chart.draw_series(LineSeries::new(
                    [(from, from * factor), (to, to * factor)],
                    band_style,
                ))?;
            }
        }
    }
    let base = plot.get_base_pixel();
    for si in drawing_order(panel) {
        let series = &panel.series[si];
        let (colour, shape, _) = marks::style(si);
        for p in &series.points {
            let (x, y) = chart.backend_coord(&(p.x, p.y));
            marks::draw(
                &plot,
                (x - base.0, y - base.1),
                shape,
                colour,
                !series.modelled,
                5,
            )?;
        }
    }
    Ok(())
}

/// The order series are drawn in, so that none hides another: measured
/// (filled) series first, under the outlines of the modelled ones; within
/// each, the largest first, so that a small group is drawn on top of a
/// large one instead of under it. Each series has its own shape, so two
/// outlines at one position both show.
fn drawing_order(panel: &ScatterPanel) -> Vec<usize> {
    let mut order: Vec<usize> = (0..panel.series.len()).collect();
    order.sort_by_key(|&i| {
        let s = &panel.series[i];
        (s.modelled, std::cmp::Reverse(s.points.len()))
    });
    order
}
