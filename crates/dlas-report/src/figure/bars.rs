//! Grouped bars, one panel per device (Figures 4, 5, 8; the compiler
//! study's Figures 1 and 7). On a ratio axis a bar grows from 1x, up for a
//! gain and down for a loss; the legend sits in a row above the plot.

use super::layout::{self, Entry, Scale, Swatch};
use super::{COLOURS, DrawResult, Panel};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// Pixels of the plot itself, between the legend and the group names.
const PLOT_HEIGHT: u32 = 240;
const MARGIN: u32 = 8;
const CAPTION_SIZES: [f64; 3] = [16.0, 14.0, 12.0];
const GROUP_FONT: f64 = 11.0;
const Y_LABEL_AREA: u32 = 78;
/// The least distance between two tick labels of the value axis.
const TICK_GAP: f64 = 24.0;

fn legend(panel: &Panel) -> Vec<Entry> {
    panel
        .series
        .iter()
        .enumerate()
        .map(|(si, s)| Entry {
            label: s.name.clone(),
            swatch: Swatch::Bar {
                colour: COLOURS[si % COLOURS.len()],
                hollow: panel.modelled,
            },
        })
        .collect()
}

/// The caption's size and lines, and the height above the plot (caption
/// and legend).
fn top(panel: &Panel, width: u32) -> ((f64, Vec<String>), u32) {
    let caption = layout::fit(&panel.title, &CAPTION_SIZES, width - 2 * MARGIN);
    let caption_height = MARGIN + (caption.0 as u32 + 4) * caption.1.len() as u32;
    let legend = layout::legend_height(&legend(panel), width - Y_LABEL_AREA - 2 * MARGIN);
    (caption, caption_height + legend + 6)
}

/// The room under the plot for the longest group name, drawn rotated.
fn group_area(panel: &Panel) -> u32 {
    let longest = panel
        .groups
        .iter()
        .map(|g| layout::text_width(g, GROUP_FONT))
        .max()
        .unwrap_or(0);
    longest + 16
}

/// The pixel height of a panel drawn `width` pixels wide.
pub(super) fn panel_height(panel: &Panel, width: u32) -> u32 {
    top(panel, width).1 + PLOT_HEIGHT + group_area(panel) + 2 * MARGIN
}

pub(super) fn draw<DB: DrawingBackend>(
    panel: &Panel,
    y_label: &str,
    area: &DrawingArea<DB, Shift>,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let (width, _) = area.dim_in_pixel();
    let (caption, top_height) = top(panel, width);
    layout::draw_centred(area, &caption, MARGIN as i32, caption.0 as i32 + 4)?;
    let caption_height = MARGIN as i32 + (caption.0 as i32 + 4) * caption.1.len() as i32;
    layout::draw_legend(
        area,
        &legend(panel),
        ((Y_LABEL_AREA + MARGIN) as i32, caption_height),
        width - Y_LABEL_AREA - 2 * MARGIN,
    )?;
    let (_, plot) = area.split_vertically(top_height);
    let values: Vec<f64> = panel
        .series
        .iter()
        .flat_map(|s| s.values.iter().flatten().copied())
        .collect();
    let scale = panel.scale;
    let range = scale.range(&values);
    let ticks = scale.ticks(range, f64::from(PLOT_HEIGHT), TICK_GAP);
    let n = panel.groups.len().max(1) as f64;
    let builder = || {
        let mut b = ChartBuilder::on(&plot);
        b.margin(MARGIN)
            .x_label_area_size(group_area(panel))
            .y_label_area_size(Y_LABEL_AREA);
        b
    };
    let description = scale.describe(y_label);
    match scale {
        Scale::Log | Scale::Ratio => {
            let y = (range.0..range.1)
                .log_scale()
                .with_key_points(ticks.clone());
            let chart = builder().build_cartesian_2d(0f64..n, y)?;
            draw_chart(chart, panel, &plot, range, &ticks, &description)
        }
        Scale::Linear => {
            // Plotters' own steps on a linear axis, as many as fit.
            let chart = builder().build_cartesian_2d(0f64..n, range.0..range.1)?;
            draw_chart(chart, panel, &plot, range, &ticks, &description)
        }
    }
}

fn draw_chart<'a, DB, Y>(
    mut chart: ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>,
    panel: &Panel,
    area: &DrawingArea<DB, Shift>,
    (low, _): (f64, f64),
    ticks: &[f64],
    description: &str,
) -> DrawResult<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let scale = panel.scale;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&|_| String::new())
        .y_labels(ticks.len())
        .y_desc(description)
        .y_label_formatter(&|y| scale.label(*y))
        .bold_line_style(BLACK.mix(0.15))
        .y_max_light_lines(1)
        .draw()?;
    // Group names, rotated, under the centre of each group of bars.
    let base = area.get_base_pixel();
    let label_style = ("sans-serif", GROUP_FONT)
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
    let from = scale.base(low);
    let k = panel.series.len().max(1) as f64;
    let bar = 0.8 / k;
    for (si, series) in panel.series.iter().enumerate() {
        let colour = COLOURS[si % COLOURS.len()];
        let offset = 0.1 + si as f64 * bar;
        let rectangles = |style: ShapeStyle| {
            series.values.iter().enumerate().filter_map(move |(gi, v)| {
                v.map(|v| {
                    let x = gi as f64 + offset;
                    Rectangle::new([(x, from), (x + bar, v)], style)
                })
            })
        };
        // Modelled values are hollow: a faint fill and an outline.
        if panel.modelled {
            chart.draw_series(rectangles(colour.mix(0.25).filled()))?;
            chart.draw_series(rectangles(colour.stroke_width(2)))?;
        } else {
            chart.draw_series(rectangles(colour.filled()))?;
        }
    }
    // The reference a bar grows from: 1x, or zero.
    if scale != Scale::Log {
        let n = panel.groups.len().max(1) as f64;
        chart.draw_series(LineSeries::new(
            [(0.0, from), (n, from)],
            BLACK.stroke_width(1),
        ))?;
    }
    Ok(())
}
