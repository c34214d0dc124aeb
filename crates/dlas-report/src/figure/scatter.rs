//! Labelled points on logarithmic axes, optionally with y = x (Figure 7).

use super::{COLOURS, DrawResult, ScatterPanel};
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
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d((low..high).log_scale(), (low..high).log_scale())?;
    chart
        .configure_mesh()
        .x_desc(&panel.x_label)
        .y_desc(y_label)
        .x_label_formatter(&|x| format!("{x:.2}"))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .draw()?;
    if let Some(label) = &panel.diagonal {
        chart
            .draw_series(LineSeries::new([(low, low), (high, high)], BLACK.mix(0.5)))?
            .label(label.as_str())
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.mix(0.5)));
        if let Some(band) = panel.band {
            let style = BLACK.mix(0.3);
            for factor in [1.0 + band, 1.0 - band] {
                let line = chart.draw_series(LineSeries::new(
                    [(low, low * factor), (high, high * factor)],
                    style,
                ))?;
                if factor > 1.0 {
                    line.label(format!("±{:.0}%", band * 100.0))
                        .legend(move |(x, y)| PathElement::new([(x, y), (x + 12, y)], style));
                }
            }
        }
    }
    for (si, series) in panel.series.iter().enumerate() {
        let colour = COLOURS[si % COLOURS.len()];
        chart
            .draw_series(
                series
                    .points
                    .iter()
                    .map(|p| Circle::new((p.x, p.y), 4, colour.filled())),
            )?
            .label(series.name.clone())
            .legend(move |(x, y)| Circle::new((x + 5, y), 4, colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()?;
    Ok(())
}
