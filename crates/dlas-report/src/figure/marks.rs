//! Marker shapes and dash patterns: with its colour, what tells a series
//! apart where colour alone cannot, on lines that coincide (Figure 3's
//! weight-pruning ratios) and points that share a position (Figure 7's two
//! GPUs).
//!
//! Markers are drawn in pixels around their centre, so every body draws
//! them alike. A hollow marker is an outline: two series' outlines of
//! different shapes at one position both stay visible, which filled
//! markers would not; the figure-layout test checks that no marker is
//! covered by a later one of another series.

use super::layout::DrawResult;
use plotters::coord::Shift;
use plotters::prelude::*;

/// A marker's outline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    Circle,
    Square,
    TriangleUp,
    Diamond,
    TriangleDown,
    Star,
    Plus,
    Cross,
}

/// The shapes in the order series take them: the most distinct first.
pub(super) const SHAPES: [Shape; 8] = [
    Shape::Circle,
    Shape::Square,
    Shape::TriangleUp,
    Shape::Diamond,
    Shape::TriangleDown,
    Shape::Star,
    Shape::Plus,
    Shape::Cross,
];

/// A line's dash pattern: (dash, gap) in pixels, or solid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dash {
    Solid,
    Dashed,
    Dotted,
    Long,
}

/// The patterns in the order series take them; with [`SHAPES`] (eight,
/// a multiple of four) and the ten colours, no two of up to ten series
/// share a colour, and no two of up to eight a shape.
pub(super) const DASHES: [Dash; 4] = [Dash::Solid, Dash::Dashed, Dash::Dotted, Dash::Long];

impl Dash {
    /// Dash and gap lengths in pixels (`None`: solid).
    pub(super) fn pattern(self) -> Option<(i32, i32)> {
        match self {
            Dash::Solid => None,
            Dash::Dashed => Some((8, 4)),
            Dash::Dotted => Some((2, 3)),
            Dash::Long => Some((14, 4)),
        }
    }
}

/// The ten colours of matplotlib's `tab10`, so eight networks stay apart
/// (here, beside the shapes and dashes a series takes with its colour).
pub(super) const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The style of series `i`: its colour, shape and dash pattern.
pub(super) fn style(i: usize) -> (RGBColor, Shape, Dash) {
    (
        COLOURS[i % COLOURS.len()],
        SHAPES[i % SHAPES.len()],
        DASHES[i % DASHES.len()],
    )
}

impl Shape {
    /// The outline's vertices around (0, 0) for a marker of radius `r`
    /// (closed: the first vertex again at the end); none for a circle.
    fn outline(self, r: i32) -> Vec<(i32, i32)> {
        let polar = |points: usize, radii: &[f64], turn: f64| -> Vec<(i32, i32)> {
            (0..points)
                .map(|k| {
                    let angle = turn + std::f64::consts::TAU * k as f64 / points as f64;
                    let radius = f64::from(r) * radii[k % radii.len()];
                    (
                        (radius * angle.sin()).round() as i32,
                        (-radius * angle.cos()).round() as i32,
                    )
                })
                .collect()
        };
        let (a, t) = (r, r / 3 + 1);
        let mut points = match self {
            Shape::Circle => return Vec::new(),
            Shape::Square => {
                let s = r * 4 / 5;
                vec![(-s, -s), (s, -s), (s, s), (-s, s)]
            }
            Shape::TriangleUp => polar(3, &[1.15], 0.0),
            Shape::TriangleDown => polar(3, &[1.15], std::f64::consts::PI),
            Shape::Diamond => vec![(0, -a), (a, 0), (0, a), (-a, 0)],
            Shape::Star => polar(10, &[1.2, 0.5], 0.0),
            Shape::Plus => vec![
                (-t, -a),
                (t, -a),
                (t, -t),
                (a, -t),
                (a, t),
                (t, t),
                (t, a),
                (-t, a),
                (-t, t),
                (-a, t),
                (-a, -t),
                (-t, -t),
            ],
            Shape::Cross => polar(12, &[1.1, 0.45, 0.45], -std::f64::consts::PI / 12.0),
        };
        points.push(points[0]);
        points
    }
}

/// Draws a marker of `shape` at `centre` (pixels of `area`), filled or as
/// an outline.
pub(super) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    centre: (i32, i32),
    shape: Shape,
    colour: RGBColor,
    filled: bool,
    r: i32,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let outline = shape.outline(r);
    let at = |p: &(i32, i32)| (centre.0 + p.0, centre.1 + p.1);
    match (outline.is_empty(), filled) {
        (true, true) => area.draw(&Circle::new(centre, r, colour.filled()))?,
        (true, false) => area.draw(&Circle::new(centre, r, colour.stroke_width(2)))?,
        (false, true) => area.draw(&Polygon::new(
            outline.iter().map(at).collect::<Vec<_>>(),
            colour.filled(),
        ))?,
        (false, false) => area.draw(&PathElement::new(
            outline.iter().map(at).collect::<Vec<_>>(),
            colour.stroke_width(2),
        ))?,
    }
    Ok(())
}

/// Draws a line through `points` (pixels of `area`) in `dash`.
pub(super) fn draw_line<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    points: &[(i32, i32)],
    colour: RGBColor,
    dash: Dash,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let style = colour.stroke_width(2);
    match dash.pattern() {
        None => area.draw(&PathElement::new(points.to_vec(), style))?,
        Some((on, off)) => area.draw(&plotters::element::DashedPathElement::new(
            points.iter().copied(),
            on,
            off,
            style,
        ))?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_series_differ_in_colour_and_shape() {
        let styles: Vec<_> = (0..8).map(style).collect();
        for (i, a) in styles.iter().enumerate() {
            for b in &styles[i + 1..] {
                assert!(a.0 != b.0 && a.1 != b.1, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn outlines_are_closed_and_within_their_radius() {
        for shape in SHAPES.into_iter().filter(|s| *s != Shape::Circle) {
            let outline = shape.outline(5);
            assert_eq!(outline.first(), outline.last(), "{shape:?}");
            assert!(
                outline.iter().all(|(x, y)| x.abs() <= 6 && y.abs() <= 6),
                "{shape:?} {outline:?}"
            );
        }
    }
}
