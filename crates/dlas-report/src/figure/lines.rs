//! Lines of points against a level, one series per network, the chosen
//! point of each series ringed (Figure 3).

use super::{COLOURS, DrawResult, LinePanel};
use plotters::coord::Shift;
use plotters::prelude::*;

pub(super) fn draw<DB: DrawingBackend>(
    panel: &LinePanel,
    legend: bool,
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
        let mut chart =
            builder(area).build_cartesian_2d(0f64..1f64, (low / 1.3..high * 1.3).log_scale())?;
        chart
            .configure_mesh()
            .x_desc(&panel.x_label)
            .y_desc(&panel.y_label)
            .y_labels(8)
            .y_label_formatter(&|y| super::round(*y).to_string())
            .draw()?;
        draw_series(&mut chart, panel, legend)?;
    } else {
        let pad = ((high - low) * 0.05).max(1e-9);
        let mut chart = builder(area).build_cartesian_2d(0f64..1f64, (low - pad)..(high + pad))?;
        chart
            .configure_mesh()
            .x_desc(&panel.x_label)
            .y_desc(&panel.y_label)
            .draw()?;
        draw_series(&mut chart, panel, legend)?;
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
    legend: bool,
) -> DrawResult<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64>,
{
    for (si, series) in panel.series.iter().enumerate() {
        let colour = COLOURS[si % COLOURS.len()];
        let points: Vec<(f64, f64)> = series.points.iter().map(|p| (p[0], p[1])).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))?
            .label(series.name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], colour.stroke_width(2)));
        chart.draw_series(
            points
                .iter()
                .map(|&(x, y)| Circle::new((x, y), 3, colour.filled())),
        )?;
        if let Some([x, y]) = series.marked {
            chart.draw_series([Circle::new((x, y), 7, BLACK.stroke_width(2))])?;
        }
    }
    if legend && !panel.series.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .draw()?;
    }
    Ok(())
}
