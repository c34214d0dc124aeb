//! Figures as data and their rendering to SVG and PNG.
//!
//! Text is laid out with the embedded DejaVu Sans (assets/, with its
//! licence), so the output does not depend on the fonts of the machine, and
//! the same data gives the same bytes. One module draws each kind of body.

mod bars;
mod heatmap;
mod layout;
mod lines;
mod marks;
mod matrices;
mod scatter;
mod stack;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde::{Serialize, Serializer};

pub use layout::Scale;
use layout::{DrawResult, register_font};
use marks::COLOURS;

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
    /// The values come from the performance model, not a measurement:
    /// drawn as hollow bars.
    pub modelled: bool,
    /// How the value axis maps values; logarithmic from its floor unless
    /// said otherwise.
    #[serde(skip_serializing_if = "Scale::is_log")]
    pub scale: Scale,
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
    /// The points come from the performance model, not a measurement:
    /// drawn hollow, measured points filled.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub modelled: bool,
}

/// A scatter plot; `diagonal` draws y = x with its legend label.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScatterPanel {
    pub title: String,
    pub x_label: String,
    pub series: Vec<ScatterSeries>,
    pub diagonal: Option<String>,
    /// A band of ±this fraction around y = x (drawn with the diagonal).
    pub band: Option<f64>,
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

/// A layer of the acceleration stack and the values a study gives it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackLayer {
    pub name: String,
    /// One line of text per group of values (wrapped when drawn).
    pub values: Vec<String>,
}

/// A real-valued matrix drawn as a heat map.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MatrixPanel {
    pub title: String,
    /// A line under the title: what the panel shows in numbers.
    pub note: String,
    pub rows: usize,
    pub columns: usize,
    /// Row-major; snapshots show one line of text per row.
    #[serde(serialize_with = "rows_as_text")]
    pub values: Vec<f64>,
    /// The magnitude drawn at full colour.
    pub scale: f64,
}

/// A series of (x, y) points joined by a line, with one point ringed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineSeries {
    pub name: String,
    pub points: Vec<[f64; 2]>,
    pub marked: Option<[f64; 2]>,
}

/// A panel of line series over x in [0, 1], or over `x_range`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinePanel {
    pub title: String,
    pub x_label: String,
    /// The x axis' extent when it is not [0, 1] (e.g. log2 of batch sizes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_range: Option<[f64; 2]>,
    /// The x values are log2 of a count (batch sizes, depths): ticks go at
    /// integer powers of two only and are labelled with the count (1, 2,
    /// 4, ...), since a fractional power such as 2^0.5 is no size anyone
    /// ran.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub x_powers_of_two: bool,
    pub y_label: String,
    pub log_y: bool,
    /// The y extent of the data when several panels share one scale
    /// ([`share_y`]), so that panels read against each other are drawn
    /// alike; each panel fits its own data otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub y_range: Option<[f64; 2]>,
    /// For ratios: values within this factor of each other are a tie (the
    /// claims' tolerance), so a linear y axis spans at least this factor
    /// either side of its data's middle; otherwise run-to-run noise of a
    /// flat series would fill the panel and read as a trend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tie: Option<f64>,
    pub series: Vec<LineSeries>,
    /// Drawn across the panel when non-empty, e.g. why a series is missing.
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Body {
    Bars(Vec<Panel>),
    Scatter(Vec<ScatterPanel>),
    Heatmap(Heatmap),
    Stack(Vec<StackLayer>),
    /// Heat maps laid out `columns` to a row.
    Matrices {
        columns: usize,
        panels: Vec<MatrixPanel>,
    },
    /// Line panels laid out `columns` to a row.
    Lines {
        columns: usize,
        panels: Vec<LinePanel>,
    },
}

/// Gives every panel of `panels` the y extent of all their data, so they
/// share one scale (the axis label should say so).
pub fn share_y(panels: &mut [LinePanel]) {
    let ys = panels
        .iter()
        .flat_map(|p| p.series.iter())
        .flat_map(|s| s.points.iter().map(|p| p[1]));
    let (low, high) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), y| {
        (l.min(y), h.max(y))
    });
    if low.is_finite() {
        for panel in panels {
            panel.y_range = Some([low, high]);
        }
    }
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
const LINE_PANEL: (u32, u32) = (620, 360);
const TITLE_HEIGHT: u32 = 40;
/// A further line of a wrapped title.
const TITLE_LINE: u32 = 24;
const FOOTER_LINE: u32 = 17;
/// Footer characters per pixel of width: DejaVu Sans at 13 px averages
/// about 7 px a character.
const FOOTER_CHAR_PX: u32 = 7;

fn round(v: f64) -> f64 {
    dlas_core::results::round_significant(v, 3)
}

/// Splits `text` at spaces into lines of at most `width` characters (a
/// longer word stays whole).
pub(crate) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn rows_as_text<S: Serializer>(values: &[f64], s: S) -> Result<S::Ok, S::Error> {
    // The panel's column count is not known here; 24 values a line keeps
    // snapshot lines readable whatever the matrix.
    let lines: Vec<String> = values
        .chunks(24)
        .map(|row| {
            row.iter()
                .map(|v| round(*v).to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    lines.serialize(s)
}

impl FigureData {
    /// Width and height of the body in pixels, without title and footer.
    fn body_size(&self) -> (u32, u32) {
        match &self.body {
            Body::Bars(panels) => {
                let groups = panels.iter().map(|p| p.groups.len()).max().unwrap_or(1);
                let width = (220 + 22 * groups as u32).max(900);
                let height = panels.iter().map(|p| bars::panel_height(p, width)).sum();
                (width, height)
            }
            Body::Scatter(panels) => (900, PANEL_HEIGHT * panels.len().max(1) as u32),
            Body::Heatmap(h) => (
                (420 + 110 * h.columns.len() as u32).max(900),
                heatmap::top(h) + 40 + 18 * h.rows.len() as u32,
            ),
            Body::Stack(layers) => (
                1100,
                40 + layers.iter().map(stack::band_height).sum::<u32>(),
            ),
            Body::Matrices { columns, panels } => {
                let (w, h) = panels.first().map_or((0, 0), matrices::panel_size);
                let rows = panels.len().div_ceil((*columns).max(1)) as u32;
                ((w * *columns as u32).max(900), h * rows + 40)
            }
            Body::Lines { columns, panels } => {
                let rows = panels.len().div_ceil((*columns).max(1)) as u32;
                let width = LINE_PANEL.0 * *columns as u32;
                let legend =
                    layout::legend_height(&lines::legend(&lines::names(panels)), width - 20);
                (width, LINE_PANEL.1 * rows + legend)
            }
        }
    }

    /// The footer wrapped to the figure's width.
    fn footer_lines(&self, width: u32) -> Vec<String> {
        wrap(&self.footer, ((width - 20) / FOOTER_CHAR_PX) as usize)
    }

    fn footer_height(&self, width: u32) -> u32 {
        10 + FOOTER_LINE * self.footer_lines(width).len() as u32
    }

    /// The title's size and lines: shrunk, then wrapped, to fit `width`.
    fn title_lines(&self, width: u32) -> (f64, Vec<String>) {
        layout::fit(
            &format!("Figure {}: {}", self.number, self.title),
            &[20.0, 18.0, 16.0],
            width - 20,
        )
    }

    fn title_height(&self, width: u32) -> u32 {
        TITLE_HEIGHT + TITLE_LINE * (self.title_lines(width).1.len() as u32 - 1)
    }

    /// Width and height in pixels.
    pub fn size(&self) -> (u32, u32) {
        register_font();
        let (width, body) = self.body_size();
        (
            width,
            self.title_height(width) + body + self.footer_height(width),
        )
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
        let (width, height) = root.dim_in_pixel();
        let (main, footer) = root.split_vertically(height - self.footer_height(width));
        layout::draw_centred(&main, &self.title_lines(width), 8, TITLE_LINE as i32)?;
        let (_, main) = main.split_vertically(self.title_height(width));
        match &self.body {
            Body::Bars(panels) => {
                let mut rest = main;
                for panel in panels {
                    let (area, below) = rest.split_vertically(bars::panel_height(panel, width));
                    bars::draw(panel, &self.y_label, &area)?;
                    rest = below;
                }
            }
            Body::Scatter(panels) => {
                let areas = main.split_evenly((panels.len().max(1), 1));
                for (panel, area) in panels.iter().zip(areas) {
                    scatter::draw(panel, &self.y_label, &area)?;
                }
            }
            Body::Heatmap(heatmap) => heatmap::draw(heatmap, &main)?,
            Body::Stack(layers) => stack::draw(layers, &main)?,
            Body::Matrices { columns, panels } => {
                let (w, h) = panels.first().map_or((0, 0), matrices::panel_size);
                for (i, panel) in panels.iter().enumerate() {
                    let (x, y) = ((i % columns) as u32 * w, (i / columns) as u32 * h);
                    let area = main.clone().shrink((x, y), (w, h));
                    matrices::draw(panel, &area)?;
                }
                let rows = panels.len().div_ceil((*columns).max(1)) as u32;
                matrices::draw_legend(&main, (rows * h) as i32 + 8)?;
            }
            Body::Lines { columns, panels } => {
                let names = lines::names(panels);
                let legend = lines::legend(&names);
                layout::draw_legend(&main, &legend, (10, 0), width - 20)?;
                let (_, main) = main.split_vertically(layout::legend_height(&legend, width - 20));
                let rows = panels.len().div_ceil((*columns).max(1));
                let areas = main.split_evenly((rows, *columns));
                for (panel, area) in panels.iter().zip(areas) {
                    lines::draw(panel, &names, &area)?;
                }
            }
        }
        for (i, line) in self.footer_lines(width).into_iter().enumerate() {
            footer.draw(&Text::new(
                line,
                (10, 8 + (FOOTER_LINE * i as u32) as i32),
                ("sans-serif", 13).into_font(),
            ))?;
        }
        root.present()?;
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
            Body::Lines { panels, .. } => {
                for r in panels.iter_mut().filter_map(|p| p.y_range.as_mut()) {
                    *r = [round(r[0]), round(r[1])];
                }
                for s in panels.iter_mut().flat_map(|p| p.series.iter_mut()) {
                    for p in s.points.iter_mut().chain(s.marked.iter_mut()) {
                        *p = [round(p[0]), round(p[1])];
                    }
                }
            }
            Body::Matrices { panels, .. } => {
                for p in panels {
                    p.scale = round(p.scale);
                }
            }
            Body::Heatmap(_) | Body::Stack(_) => {}
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
            body: Body::Bars(vec![Panel {
                modelled: true,
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
                scale: Scale::Log,
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
    fn long_footers_wrap_within_the_width() {
        let mut f = sample();
        f.footer = "Source: a long list of files; ".repeat(20);
        let (width, _) = f.size();
        let lines = f.footer_lines(width);
        assert!(lines.len() > 2, "{lines:?}");
        assert!(
            lines
                .iter()
                .all(|l| l.chars().count() as u32 * FOOTER_CHAR_PX <= width - 20)
        );
        let svg = f.svg().unwrap();
        assert!(svg.contains(lines.last().unwrap().trim()), "{svg}");
        assert_eq!(wrap("a bb ccc", 4), ["a bb", "ccc"]);
        assert_eq!(wrap("toolongword x", 4), ["toolongword", "x"]);
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
                modelled: false,
            }],
            diagonal: Some("y = x".into()),
            band: None,
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

    #[test]
    fn stack_matrices_and_lines_render() {
        let mut f = sample();
        f.body = Body::Stack(vec![StackLayer {
            name: "Hardware".into(),
            values: vec!["i7, host".into()],
        }]);
        let svg = f.svg().unwrap();
        assert!(
            svg.contains("1  Hardware") && svg.contains("i7, host"),
            "{svg}"
        );

        f.body = Body::Matrices {
            columns: 2,
            panels: vec![MatrixPanel {
                title: "(a) dense".into(),
                note: "2 x 2".into(),
                rows: 2,
                columns: 2,
                values: vec![1.0, -1.0, 0.0, 0.5],
                scale: 1.0,
            }],
        };
        let svg = f.svg().unwrap();
        // Full red, full blue and the grey of an exact zero.
        for colour in ["#B40426", "#3B4CC0", "#C8C8C8"] {
            assert!(svg.contains(colour), "{colour} missing");
        }
        assert_eq!(f.png().unwrap(), f.png().unwrap());

        f.body = Body::Lines {
            columns: 2,
            panels: vec![LinePanel {
                title: "ratio".into(),
                x_label: "level".into(),
                x_range: None,
                x_powers_of_two: false,
                y_label: "x".into(),
                log_y: true,
                y_range: None,
                tie: None,
                series: vec![LineSeries {
                    name: "cifar10/resnet18".into(),
                    points: vec![[0.5, 2.0], [0.8, 5.0]],
                    marked: Some([0.8, 5.0]),
                }],
                note: "no recorded accuracy".into(),
            }],
        };
        let svg = f.svg().unwrap();
        assert!(svg.contains("<polyline") || svg.contains("<path"), "{svg}");
        assert!(svg.contains("no recorded accuracy"));
        assert!(svg.matches("<circle").count() >= 3);
    }
}
