//! What every kind of body shares to keep its texts apart: value axes with
//! ticks chosen for the space they have, text measured with the embedded
//! font, titles that fit their width, and legends laid out in rows outside
//! the data area.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Serialize;
use std::sync::Once;

use super::marks::{self, Dash, Shape};

/// What drawing returns: plotters' errors are of many types.
pub(super) type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

/// Registers the embedded font once, before any text is measured or drawn
/// (here, beside the measuring, so the bodies import this leaf and not
/// `figure/mod.rs`).
pub(super) fn register_font() {
    REGISTER.call_once(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .unwrap_or_else(|_| panic!("the embedded font is a valid TrueType file"));
    });
}

/// How a panel's value axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum Scale {
    /// Logarithmic, bars from the axis' floor (absolute quantities: times,
    /// throughputs).
    #[default]
    Log,
    /// Logarithmic around 1x: bars grow up from 1 for a gain and down from
    /// it for a loss, with a reference line at 1 and ticks on both sides.
    Ratio,
    /// Linear with zero on the axis, for quantities that can be negative.
    Linear,
}

impl Scale {
    pub fn is_log(&self) -> bool {
        *self == Scale::Log
    }

    /// Where bars start: 1 on a ratio axis, 0 on a linear one, the floor
    /// of a logarithmic one.
    pub(super) fn base(self, low: f64) -> f64 {
        match self {
            Scale::Log => low,
            Scale::Ratio => 1.0,
            Scale::Linear => 0.0,
        }
    }

    /// The axis' extent for `values`, with room above and below.
    pub(super) fn range(self, values: &[f64]) -> (f64, f64) {
        let fold = |init: f64, f: fn(f64, f64) -> f64| values.iter().copied().fold(init, f);
        match self {
            Scale::Log => {
                let positive: Vec<f64> = values.iter().copied().filter(|v| *v > 0.0).collect();
                let low = positive.iter().copied().fold(f64::INFINITY, f64::min);
                let high = positive.iter().copied().fold(0f64, f64::max);
                if low.is_finite() {
                    (low / 2.0, high * 2.0)
                } else {
                    (0.01, 1.0)
                }
            }
            Scale::Ratio => {
                let low = fold(1.0, f64::min).max(1e-6);
                let high = fold(1.0, f64::max);
                ((low / 1.25).min(0.45), (high * 1.25).max(2.2))
            }
            Scale::Linear => {
                let low = fold(0.0, f64::min);
                let high = fold(0.0, f64::max);
                let pad = ((high - low) * 0.08).max(1e-3);
                (low - pad, high + pad)
            }
        }
    }

    /// Tick values on `[low, high]` at least `gap` pixels apart along an
    /// axis `pixels` long: powers of two around 1x, 1-2-5 steps, then
    /// decades, whichever is densest without crowding.
    pub(super) fn ticks(self, (low, high): (f64, f64), pixels: f64, gap: f64) -> Vec<f64> {
        if self == Scale::Linear {
            let raw = (high - low) * gap / pixels;
            let magnitude = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 5.0, 10.0]
                .iter()
                .map(|m| m * magnitude)
                .find(|s| *s >= raw)
                .unwrap_or(10.0 * magnitude);
            let first = (low / step).ceil() as i64;
            let last = (high / step).floor() as i64;
            return (first..=last).map(|i| i as f64 * step).collect();
        }
        let span = (high / low).ln();
        let fits = |ratio: f64| pixels * ratio.ln() / span >= gap;
        let decades = (low.log10().floor() as i32)..=(high.log10().ceil() as i32);
        let within = |v: &f64| *v >= low * 0.999 && *v <= high * 1.001;
        let steps = |mantissas: &[f64], every: i32| -> Vec<f64> {
            decades
                .clone()
                .filter(|d| d.rem_euclid(every) == 0)
                .flat_map(|d| mantissas.iter().map(move |m| m * 10f64.powi(d)))
                .filter(within)
                .collect()
        };
        let powers_of_two: Vec<f64> = ((low.log2().ceil() as i32)..=(high.log2().floor() as i32))
            .map(|k| 2f64.powi(k))
            .collect();
        if self == Scale::Ratio && low >= 0.1 && high <= 64.0 && fits(2.0) {
            return powers_of_two;
        }
        if fits(2.5) {
            steps(&[1.0, 2.0, 5.0], 1)
        } else if fits(3.4) {
            steps(&[1.0, 3.0], 1)
        } else if fits(10.0) {
            steps(&[1.0], 1)
        } else {
            steps(&[1.0], 2)
        }
    }

    /// A tick's label: three significant digits, no trailing zeros, and
    /// an "x" on a ratio axis.
    pub(super) fn label(self, v: f64) -> String {
        // A linear axis' zero can come out of its steps as -2e-16.
        let v = if v.abs() < 1e-9 {
            0.0
        } else {
            dlas_core::results::round_significant(v, 3)
        };
        match self {
            Scale::Ratio => format!("{v}x"),
            Scale::Log | Scale::Linear => format!("{v}"),
        }
    }

    /// The axis description with the scale said where it is not linear.
    pub(super) fn describe(self, label: &str) -> String {
        if self == Scale::Linear || label.contains("log") {
            label.to_string()
        } else {
            format!("{label}, log scale")
        }
    }
}

/// The width in pixels of `text` at `size` in the embedded font, as the
/// PNG backend lays it out (the wider of the two renderings).
pub(super) fn text_width(text: &str, size: f64) -> u32 {
    register_font();
    ("sans-serif", size)
        .into_font()
        .box_size(text)
        .map_or(text.chars().count() as u32 * size as u32, |(w, _)| w)
}

/// `text` at the largest of `sizes` that fits `width`, else wrapped at the
/// smallest: the size and the lines.
pub(super) fn fit(text: &str, sizes: &[f64], width: u32) -> (f64, Vec<String>) {
    for &size in sizes {
        if text_width(text, size) <= width {
            return (size, vec![text.to_string()]);
        }
    }
    let size = *sizes.last().unwrap_or(&12.0);
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(line) if text_width(&format!("{line} {word}"), size) <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    (size, lines)
}

/// Draws `lines` centred on `area`'s width from `top`, `step` pixels apart.
pub(super) fn draw_centred<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (size, lines): &(f64, Vec<String>),
    top: i32,
    step: i32,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let (width, _) = area.dim_in_pixel();
    let style = ("sans-serif", *size)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    for (i, line) in lines.iter().enumerate() {
        area.draw(&Text::new(
            line.clone(),
            (width as i32 / 2, top + step * i as i32),
            style.clone(),
        ))?;
    }
    Ok(())
}

/// What a legend entry shows beside its label.
#[derive(Debug, Clone, Copy)]
pub(super) enum Swatch {
    /// A bar's colour, hollow (faint fill, outline) for modelled values.
    Bar { colour: RGBColor, hollow: bool },
    /// A line series: its dash pattern with its marker in the middle.
    Line {
        colour: RGBColor,
        shape: Shape,
        dash: Dash,
    },
    /// A scatter series' marker, filled (measured) or hollow (modelled).
    Marker {
        colour: RGBColor,
        shape: Shape,
        filled: bool,
    },
    /// A thin grey rule (a reference line).
    Rule(RGBAColor),
}

pub(super) struct Entry {
    pub label: String,
    pub swatch: Swatch,
}

impl Swatch {
    /// Its width in pixels: a line's is wide enough to show its dashes.
    fn width(self) -> i32 {
        match self {
            Swatch::Line { .. } => 3 * SWATCH,
            _ => SWATCH,
        }
    }
}

const LEGEND_FONT: f64 = 12.0;
const LEGEND_ROW: u32 = 18;
const SWATCH: i32 = 14;
const ENTRY_GAP: u32 = 18;

/// The entries of each legend row within `width`, each with its x offset.
fn rows(entries: &[Entry], width: u32) -> Vec<Vec<(usize, u32)>> {
    let mut rows: Vec<Vec<(usize, u32)>> = Vec::new();
    let mut x = 0;
    for (i, entry) in entries.iter().enumerate() {
        let w = entry.swatch.width() as u32 + 5 + text_width(&entry.label, LEGEND_FONT);
        if rows.is_empty() || (x > 0 && x + w > width) {
            rows.push(Vec::new());
            x = 0;
        }
        rows.last_mut().unwrap().push((i, x));
        x += w + ENTRY_GAP;
    }
    rows
}

/// The height of a legend of `entries` laid out in rows within `width`.
pub(super) fn legend_height(entries: &[Entry], width: u32) -> u32 {
    LEGEND_ROW * rows(entries, width).len() as u32
}

/// Draws the legend in rows from (`left`, `top`) within `width` pixels.
pub(super) fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[Entry],
    (left, top): (i32, i32),
    width: u32,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let font = ("sans-serif", LEGEND_FONT)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (r, row) in rows(entries, width).iter().enumerate() {
        let y = top + (r as u32 * LEGEND_ROW) as i32 + LEGEND_ROW as i32 / 2;
        for &(i, dx) in row {
            let x = left + dx as i32;
            let half = SWATCH / 2;
            match entries[i].swatch {
                Swatch::Bar { colour, hollow } => {
                    let corners = [(x, y - half + 2), (x + SWATCH, y + half - 2)];
                    if hollow {
                        area.draw(&Rectangle::new(corners, colour.mix(0.25).filled()))?;
                        area.draw(&Rectangle::new(corners, colour.stroke_width(2)))?;
                    } else {
                        area.draw(&Rectangle::new(corners, colour.filled()))?;
                    }
                }
                Swatch::Line {
                    colour,
                    shape,
                    dash,
                } => {
                    let width = entries[i].swatch.width();
                    marks::draw_line(area, &[(x, y), (x + width, y)], colour, dash)?;
                    marks::draw(area, (x + width / 2, y), shape, colour, false, 4)?;
                }
                Swatch::Marker {
                    colour,
                    shape,
                    filled,
                } => {
                    marks::draw(area, (x + half, y), shape, colour, filled, 5)?;
                }
                Swatch::Rule(colour) => {
                    area.draw(&PathElement::new([(x, y), (x + SWATCH, y)], colour))?;
                }
            }
            area.draw(&Text::new(
                entries[i].label.clone(),
                (x + entries[i].swatch.width() + 5, y),
                font.clone(),
            ))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_ticks_straddle_one() {
        let range = Scale::Ratio.range(&[0.3, 1.4]);
        let ticks = Scale::Ratio.ticks(range, 240.0, 22.0);
        assert_eq!(ticks, [0.25, 0.5, 1.0, 2.0]);
        let labels: Vec<String> = ticks.iter().map(|t| Scale::Ratio.label(*t)).collect();
        assert_eq!(labels, ["0.25x", "0.5x", "1x", "2x"]);
        // Only gains: 1x still has a tick below it.
        let range = Scale::Ratio.range(&[1.2, 30.0]);
        let ticks = Scale::Ratio.ticks(range, 240.0, 22.0);
        assert!(ticks[0] < 1.0 && ticks.contains(&1.0), "{ticks:?}");
    }

    #[test]
    fn crowded_log_axes_thin_their_ticks() {
        let ticks = Scale::Log.ticks((0.01, 1e6), 240.0, 22.0);
        let ratios: Vec<f64> = ticks.windows(2).map(|w| w[1] / w[0]).collect();
        assert!(ratios.iter().all(|r| *r >= 10.0 - 1e-9), "{ticks:?}");
    }

    #[test]
    fn linear_ticks_include_zero_and_negatives() {
        let range = Scale::Linear.range(&[-0.3, 0.4]);
        let ticks = Scale::Linear.ticks(range, 240.0, 22.0);
        assert!(ticks.contains(&0.0) && ticks[0] < 0.0, "{ticks:?}");
    }

    #[test]
    fn long_titles_shrink_then_wrap() {
        let title =
            "Figure 8: Speedup from tuning (best untuned over best tuned) for dense networks";
        let (size, lines) = fit(title, &[20.0, 18.0, 16.0], 2000);
        assert_eq!((size, lines.len()), (20.0, 1));
        let (_, lines) = fit(title, &[20.0, 18.0, 16.0], 300);
        assert!(lines.len() > 1);
        assert!(
            lines.iter().all(|l| text_width(l, 16.0) <= 300),
            "{lines:?}"
        );
    }
}
