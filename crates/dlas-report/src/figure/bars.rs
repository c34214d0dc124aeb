//! Grouped bars on a logarithmic axis, one panel per device (Figures 4, 5, 8).

use super::{COLOURS, DrawResult, Panel};
use plotters::coord::Shift;
use plotters::prelude::*;

pub(super) fn draw<DB: DrawingBackend>(
    panel: &Panel,
    y_label: &str,
    area: &DrawingArea<DB, Shift>,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let values = panel
        .series
        .iter()
        .flat_map(|s| s.values.iter().flatten().copied());
    let (low, high) = values.fold((f64::INFINITY, 0f64), |(l, h), v| (l.min(v), h.max(v)));
    let (low, high) = if low.is_finite() && low > 0.0 {
        (low / 2.0, high * 2.0)
    } else {
        (0.01, 1.0)
    };
    let n = panel.groups.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(170)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n as f64, (low..high).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&|_| String::new())
        .y_desc(y_label)
        .y_label_formatter(&|y| format!("{y:.3}"))
        .draw()?;
    // Group names, rotated, under the centre of each group of bars.
    let base = area.get_base_pixel();
    let label_style = ("sans-serif", 11)
        .into_font()
        .transform(FontTransform::Rotate90)
        .color(&BLACK);
    for (i, group) in panel.groups.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64 + 0.5, low));
        area.draw(&Text::new(
            group.clone(),
            (x - base.0 + 6, y - base.1 + 6),
            label_style.clone(),
        ))?;
    }
    let k = panel.series.len().max(1) as f64;
    let bar = 0.8 / k;
    for (si, series) in panel.series.iter().enumerate() {
        let colour = COLOURS[si % COLOURS.len()];
        let offset = 0.1 + si as f64 * bar;
        chart
            .draw_series(series.values.iter().enumerate().filter_map(|(gi, v)| {
                v.map(|v| {
                    let x = gi as f64 + offset;
                    // Modelled values are hollow: outline and a faint fill.
                    let style = if panel.modelled {
                        colour.mix(0.25).filled()
                    } else {
                        colour.filled()
                    };
                    Rectangle::new([(x, low), (x + bar, v)], style)
                })
            }))?
            .label(series.name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
        if panel.modelled {
            chart.draw_series(series.values.iter().enumerate().filter_map(|(gi, v)| {
                v.map(|v| {
                    let x = gi as f64 + offset;
                    Rectangle::new([(x, low), (x + bar, v)], colour.stroke_width(2))
                })
            }))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()?;
    Ok(())
}
