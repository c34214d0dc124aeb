//! Figures as data and their SVG rendering.
//!
//! Text is laid out with the embedded DejaVu Sans (assets/, with its
//! licence), so the output does not depend on the fonts of the machine.

use plotters::prelude::*;
use plotters::style::FontStyle;
use serde::Serialize;
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

fn register_font() {
    REGISTER.call_once(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .unwrap_or_else(|_| panic!("the embedded font is a valid TrueType file"));
    });
}

/// One bar series: a value (or a gap) per group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    pub name: String,
    pub values: Vec<Option<f64>>,
}

/// One panel of grouped bars.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Panel {
    pub title: String,
    pub groups: Vec<String>,
    pub series: Vec<Series>,
}

/// A figure as data: what snapshot tests compare.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FigureData {
    pub number: usize,
    pub title: String,
    pub y_label: String,
    pub log_y: bool,
    pub panels: Vec<Panel>,
    pub footer: String,
}

const PANEL_HEIGHT: u32 = 420;
const FOOTER_HEIGHT: u32 = 40;
const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

impl FigureData {
    /// Renders grouped bars, one panel per row, to SVG text.
    pub fn svg(&self) -> DrawResult<String> {
        register_font();
        let groups = self
            .panels
            .iter()
            .map(|p| p.groups.len())
            .max()
            .unwrap_or(1);
        let width = (220 + 22 * groups as u32).max(900);
        let height = 40 + PANEL_HEIGHT * self.panels.len().max(1) as u32 + FOOTER_HEIGHT;
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
            root.fill(&WHITE)?;
            let (main, footer) = root.split_vertically(height - FOOTER_HEIGHT);
            let main = main.titled(
                &format!("Figure {}: {}", self.number, self.title),
                ("sans-serif", 20),
            )?;
            let areas = main.split_evenly((self.panels.len().max(1), 1));
            for (panel, area) in self.panels.iter().zip(areas) {
                self.draw_panel(panel, &area)?;
            }
            footer.draw(&Text::new(
                self.footer.clone(),
                (10, 12),
                ("sans-serif", 13).into_font(),
            ))?;
            root.present()?;
        }
        Ok(out)
    }

    fn draw_panel(
        &self,
        panel: &Panel,
        area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    ) -> DrawResult<()> {
        let values = panel
            .series
            .iter()
            .flat_map(|s| s.values.iter().flatten().copied());
        let (low, high) = values.fold((f64::INFINITY, 0f64), |(l, h), v| (l.min(v), h.max(v)));
        let (low, high) = if low.is_finite() {
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
            .y_desc(&self.y_label)
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
                        Rectangle::new([(x, low), (x + bar, v)], colour.filled())
                    })
                }))?
                .label(series.name.clone())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
                });
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

    /// The figure's numbers rounded to three significant digits, for snapshots.
    pub fn rounded(&self) -> FigureData {
        let mut copy = self.clone();
        for panel in &mut copy.panels {
            for series in &mut panel.series {
                for v in series.values.iter_mut().flatten() {
                    *v = dlas_core::results::round_significant(*v, 3);
                }
            }
        }
        copy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FigureData {
        FigureData {
            number: 99,
            title: "test".into(),
            y_label: "ms".into(),
            log_y: true,
            panels: vec![Panel {
                title: "panel".into(),
                groups: vec!["a".into(), "b".into()],
                series: vec![
                    Series {
                        name: "s1".into(),
                        values: vec![Some(1.0), None],
                    },
                    Series {
                        name: "s2".into(),
                        values: vec![Some(10.0), Some(0.5)],
                    },
                ],
            }],
            footer: "Source: test".into(),
        }
    }

    #[test]
    fn svg_is_deterministic_and_draws_every_bar() {
        let a = sample().svg().unwrap();
        assert_eq!(a, sample().svg().unwrap());
        assert!(a.starts_with("<svg"));
        assert!(a.contains("Figure 99: test"));
        // Three bars plus two legend swatches are filled rectangles.
        let filled = a.matches("<rect").count();
        assert!(filled >= 5, "{filled} rectangles");
    }
}
