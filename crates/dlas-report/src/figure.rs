//! Figures as data and their rendering to SVG and PNG.
//!
//! Text is laid out with the embedded DejaVu Sans (assets/, with its
//! licence), so the output does not depend on the fonts of the machine, and
//! the same data gives the same bytes.

use plotters::coord::Shift;
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

/// A labelled point of a scatter series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    pub label: String,
    pub x: f64,
    pub y: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScatterSeries {
    pub name: String,
    pub points: Vec<Point>,
}

/// A scatter plot; `diagonal` draws y = x.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScatterPanel {
    pub title: String,
    pub x_label: String,
    pub series: Vec<ScatterSeries>,
    pub diagonal: bool,
}

/// A grid of categorical cells (e.g. the best algorithm), coloured by value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Heatmap {
    pub rows: Vec<String>,
    pub columns: Vec<String>,
    /// `cells[row][column]`: a category, or nothing measured.
    pub cells: Vec<Vec<Option<String>>>,
    /// Categories in legend (and colour) order.
    pub categories: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Body {
    Bars(Vec<Panel>),
    Scatter(Vec<ScatterPanel>),
    Heatmap(Heatmap),
}

/// A figure as data: what snapshot tests compare.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FigureData {
    pub number: usize,
    pub title: String,
    pub y_label: String,
    pub log_y: bool,
    pub body: Body,
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

fn round(v: f64) -> f64 {
    dlas_core::results::round_significant(v, 3)
}

impl FigureData {
    /// Width and height in pixels.
    pub fn size(&self) -> (u32, u32) {
        let (width, panels) = match &self.body {
            Body::Bars(panels) => {
                let groups = panels.iter().map(|p| p.groups.len()).max().unwrap_or(1);
                (
                    (220 + 22 * groups as u32).max(900),
                    panels.len().max(1) as u32,
                )
            }
            Body::Scatter(panels) => (900, panels.len().max(1) as u32),
            Body::Heatmap(h) => {
                let height = 200 + 18 * h.rows.len() as u32;
                return (
                    (420 + 110 * h.columns.len() as u32).max(900),
                    height + FOOTER_HEIGHT,
                );
            }
        };
        (width, 40 + PANEL_HEIGHT * panels + FOOTER_HEIGHT)
    }

    /// Renders to SVG text.
    pub fn svg(&self) -> DrawResult<String> {
        register_font();
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, self.size()).into_drawing_area();
            self.draw(&root)?;
        }
        Ok(out)
    }

    /// Renders to PNG bytes.
    pub fn png(&self) -> DrawResult<Vec<u8>> {
        register_font();
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("figure.png");
        {
            let root = BitMapBackend::new(&path, self.size()).into_drawing_area();
            self.draw(&root)?;
        }
        Ok(std::fs::read(&path)?)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE)?;
        let (_, height) = root.dim_in_pixel();
        let (main, footer) = root.split_vertically(height - FOOTER_HEIGHT);
        let main = main.titled(
            &format!("Figure {}: {}", self.number, self.title),
            ("sans-serif", 20),
        )?;
        match &self.body {
            Body::Bars(panels) => {
                let areas = main.split_evenly((panels.len().max(1), 1));
                for (panel, area) in panels.iter().zip(areas) {
                    self.draw_bars(panel, &area)?;
                }
            }
            Body::Scatter(panels) => {
                let areas = main.split_evenly((panels.len().max(1), 1));
                for (panel, area) in panels.iter().zip(areas) {
                    self.draw_scatter(panel, &area)?;
                }
            }
            Body::Heatmap(heatmap) => draw_heatmap(heatmap, &main)?,
        }
        footer.draw(&Text::new(
            self.footer.clone(),
            (10, 12),
            ("sans-serif", 13).into_font(),
        ))?;
        root.present()?;
        Ok(())
    }

    fn draw_bars<DB: DrawingBackend>(
        &self,
        panel: &Panel,
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

    fn draw_scatter<DB: DrawingBackend>(
        &self,
        panel: &ScatterPanel,
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
            .y_desc(&self.y_label)
            .x_label_formatter(&|x| format!("{x:.2}"))
            .y_label_formatter(&|y| format!("{y:.2}"))
            .draw()?;
        if panel.diagonal {
            chart
                .draw_series(LineSeries::new([(low, low), (high, high)], BLACK.mix(0.5)))?
                .label("achieved = expected")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.mix(0.5)));
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

    /// The figure's numbers rounded to three significant digits, for snapshots.
    pub fn rounded(&self) -> FigureData {
        let mut copy = self.clone();
        match &mut copy.body {
            Body::Bars(panels) => {
                for v in panels
                    .iter_mut()
                    .flat_map(|p| p.series.iter_mut())
                    .flat_map(|s| s.values.iter_mut().flatten())
                {
                    *v = round(*v);
                }
            }
            Body::Scatter(panels) => {
                for p in panels
                    .iter_mut()
                    .flat_map(|p| p.series.iter_mut())
                    .flat_map(|s| s.points.iter_mut())
                {
                    p.x = round(p.x);
                    p.y = round(p.y);
                }
            }
            Body::Heatmap(_) => {}
        }
        copy
    }
}

fn draw_heatmap<DB: DrawingBackend>(h: &Heatmap, area: &DrawingArea<DB, Shift>) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let (left, top, cell_w, cell_h) = (330i32, 150i32, 110i32, 18i32);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FigureData {
        FigureData {
            number: 99,
            title: "test".into(),
            y_label: "ms".into(),
            log_y: true,
            body: Body::Bars(vec![Panel {
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
            }]),
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

    #[test]
    fn png_is_deterministic() {
        let a = sample().png().unwrap();
        assert_eq!(&a[1..4], b"PNG");
        assert_eq!(a, sample().png().unwrap());
    }

    #[test]
    fn scatter_and_heatmap_render() {
        let mut f = sample();
        f.body = Body::Scatter(vec![ScatterPanel {
            title: "s".into(),
            x_label: "expected".into(),
            series: vec![ScatterSeries {
                name: "i7".into(),
                points: vec![Point {
                    label: "a".into(),
                    x: 2.0,
                    y: 1.5,
                }],
            }],
            diagonal: true,
        }]);
        assert!(f.svg().unwrap().contains("<circle"));
        f.body = Body::Heatmap(Heatmap {
            rows: vec!["r".into()],
            columns: vec!["c".into()],
            cells: vec![vec![Some("gemm".into())]],
            categories: vec!["gemm".into()],
        });
        let svg = f.svg().unwrap();
        assert!(svg.contains("gemm") && svg.contains("<rect"), "{svg}");
    }
}
