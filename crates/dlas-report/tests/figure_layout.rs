//! Every figure of both studies, rendered to SVG, keeps each of its texts
//! inside the canvas and clear of every other text, hides no marker under
//! a later marker of another series, and marks every panel, group, column
//! or series of modelled data "(modelled)" without a footer that says
//! otherwise.
//!
//! A text's box is estimated from the embedded DejaVu Sans (the bytes the
//! crate registers with plotters) with its real glyph advances and kerning,
//! as the PNG backend lays it out (the wider of the two renderings), and
//! from the font's ascent and descent under both the SVG's and the PNG's
//! vertical anchoring; a rotation turns the box about the text's anchor as
//! `transform="rotate(a, x, y)"` does.

mod common;

use ab_glyph::{Font, FontRef, ScaleFont};
use dlas_report::figure::Body;
use dlas_report::{FigureData, Inputs, compilers, dlas};

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// How far, in pixels, a box may cross the canvas' edge or another box.
const TOLERANCE: f64 = 1.0;

/// A text of an SVG and the box it covers, in canvas pixels.
#[derive(Debug, Clone)]
struct TextBox {
    text: String,
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

fn number(tag: &str, name: &str) -> f64 {
    attribute(tag, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric {name} in {tag}"))
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The width in pixels of `text` as plotters lays it out at `size` (its
/// font size, 1.24 times the SVG's `font-size`): advances plus kerning.
fn advance(font: &FontRef, size: f64, text: &str) -> f64 {
    let scaled = font.as_scaled(size as f32);
    let mut width = 0f32;
    let mut previous = None;
    for c in text.chars() {
        let glyph = scaled.glyph_id(c);
        width += scaled.h_advance(glyph);
        if let Some(p) = previous {
            width += scaled.kern(p, glyph);
        }
        previous = Some(glyph);
    }
    f64::from(width)
}

/// The canvas size and the box of every `<text>` of `svg`.
fn text_boxes(svg: &str) -> ((f64, f64), Vec<TextBox>) {
    let font = FontRef::try_from_slice(FONT).unwrap();
    let em = f64::from(font.units_per_em().unwrap());
    let (ascent, descent) = (
        f64::from(font.ascent_unscaled()) / em,
        -f64::from(font.descent_unscaled()) / em,
    );
    let height_em = ascent + descent;
    let x_height = font
        .outline(font.glyph_id('x'))
        .map_or(0.5, |o| f64::from(o.bounds.max.y) / em);
    let head = &svg[..svg.find('>').unwrap()];
    let canvas = (number(head, "width"), number(head, "height"));
    let mut boxes = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<text ") {
        rest = &rest[start..];
        let close = rest.find('>').unwrap();
        let tag = &rest[..close];
        let end = rest.find("</text>").unwrap();
        let text = unescape(rest[close + 1..end].trim());
        rest = &rest[end..];
        let (x, y, svg_size) = (number(tag, "x"), number(tag, "y"), number(tag, "font-size"));
        let size = svg_size * 1.24;
        let width = advance(&font, size, &text);
        let left = match attribute(tag, "text-anchor") {
            Some("middle") => -width / 2.0,
            Some("end") => -width,
            _ => 0.0,
        };
        // The baseline below the anchor in the SVG (`dy`) and in the PNG
        // (plotters puts it half the size below the box it anchors, the box
        // being one SVG em high); the text spans the font's ascent above
        // and its descent below, at the SVG's em and at the PNG's scale.
        let line = svg_size.floor();
        let (svg_baseline, png_top) = match attribute(tag, "dy") {
            Some("0.76em") => (0.76 * svg_size, 0.0),
            Some("0.5ex") => (0.5 * x_height * svg_size, -line / 2.0),
            Some("-0.5ex") => (-0.5 * x_height * svg_size, -line),
            other => panic!("unexpected dy {other:?} in {tag}"),
        };
        let png_baseline = png_top + size / 2.0;
        let top = (svg_baseline - ascent * svg_size).min(png_baseline - size * ascent / height_em);
        let bottom =
            (svg_baseline + descent * svg_size).max(png_baseline + size * descent / height_em);
        let corners = [
            (left, top),
            (left + width, top),
            (left, bottom),
            (left + width, bottom),
        ];
        let turn = attribute(tag, "transform").map_or(0, |t| {
            t.trim_start_matches("rotate(")
                .split(',')
                .next()
                .unwrap()
                .parse::<i32>()
                .unwrap()
        });
        let turned = corners.map(|(dx, dy)| match turn {
            0 => (x + dx, y + dy),
            90 => (x - dy, y + dx),
            180 => (x - dx, y - dy),
            270 => (x + dy, y - dx),
            other => panic!("unexpected rotation {other} in {tag}"),
        });
        let xs = turned.map(|p| p.0);
        let ys = turned.map(|p| p.1);
        boxes.push(TextBox {
            text,
            left: xs.iter().copied().fold(f64::INFINITY, f64::min),
            right: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            top: ys.iter().copied().fold(f64::INFINITY, f64::min),
            bottom: ys.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        });
    }
    (canvas, boxes)
}

/// Every text of `svg` that leaves the canvas or overlaps another text.
fn layout_problems(svg: &str) -> Vec<String> {
    let ((width, height), boxes) = text_boxes(svg);
    let mut problems = Vec::new();
    for b in &boxes {
        if b.left < -TOLERANCE
            || b.top < -TOLERANCE
            || b.right > width + TOLERANCE
            || b.bottom > height + TOLERANCE
        {
            problems.push(format!(
                "{:?} at ({:.0}, {:.0})-({:.0}, {:.0}) leaves the {width} x {height} canvas",
                b.text, b.left, b.top, b.right, b.bottom
            ));
        }
    }
    for (i, a) in boxes.iter().enumerate() {
        for b in &boxes[i + 1..] {
            let across = a.right.min(b.right) - a.left.max(b.left);
            let down = a.bottom.min(b.bottom) - a.top.max(b.top);
            if across > TOLERANCE && down > TOLERANCE {
                problems.push(format!(
                    "{:?} at ({:.0}, {:.0}) overlaps {:?} at ({:.0}, {:.0}) by {across:.0} x {down:.0} px",
                    a.text, a.left, a.top, b.text, b.left, b.top
                ));
            }
        }
    }
    problems
}

/// A drawn shape that can be a marker, in canvas pixels.
#[derive(Debug, Clone, PartialEq)]
enum Shape {
    Circle {
        x: f64,
        y: f64,
        r: f64,
    },
    /// A closed outline or a filled polygon: its vertices.
    Polygon(Vec<(f64, f64)>),
    Rect {
        x: f64,
        y: f64,
        w: f64,
        h: f64,
    },
}

/// A marker of an SVG: its shape, its colour (the fill, or the stroke of
/// an outline), and whether it is an opaque fill that hides what it covers.
#[derive(Debug, Clone)]
struct Marker {
    shape: Shape,
    colour: String,
    opaque: bool,
}

/// Shapes wider or taller than this are bars, cells or lines, not markers.
const MARKER_SIZE: f64 = 24.0;

impl Shape {
    /// Points on the shape's boundary: what must all be covered for the
    /// shape to be hidden.
    fn outline(&self) -> Vec<(f64, f64)> {
        match self {
            Shape::Circle { x, y, r } => (0..16)
                .map(|k| {
                    let a = std::f64::consts::TAU * f64::from(k) / 16.0;
                    (x + r * a.cos(), y + r * a.sin())
                })
                .collect(),
            Shape::Polygon(points) => points.clone(),
            Shape::Rect { x, y, w, h } => vec![(*x, *y), (x + w, *y), (x + w, y + h), (*x, y + h)],
        }
    }

    /// Whether (px, py) lies inside the shape or within half a pixel of it.
    fn contains(&self, (px, py): (f64, f64)) -> bool {
        const EDGE: f64 = 0.5;
        match self {
            Shape::Circle { x, y, r } => (px - x).hypot(py - y) <= r + EDGE,
            Shape::Rect { x, y, w, h } => {
                px >= x - EDGE && px <= x + w + EDGE && py >= y - EDGE && py <= y + h + EDGE
            }
            Shape::Polygon(points) => {
                let edges = points.iter().zip(points.iter().cycle().skip(1));
                let mut inside = false;
                for (&(x0, y0), &(x1, y1)) in edges.clone() {
                    if (y0 > py) != (y1 > py) && px < x0 + (py - y0) * (x1 - x0) / (y1 - y0) {
                        inside = !inside;
                    }
                }
                inside
                    || edges.into_iter().any(|(&(x0, y0), &(x1, y1))| {
                        let (dx, dy) = (x1 - x0, y1 - y0);
                        let t = (((px - x0) * dx + (py - y0) * dy) / (dx * dx + dy * dy).max(1e-9))
                            .clamp(0.0, 1.0);
                        (px - x0 - t * dx).hypot(py - y0 - t * dy) <= EDGE
                    })
            }
        }
    }

    fn size(&self) -> (f64, f64) {
        match self {
            Shape::Circle { r, .. } => (2.0 * r, 2.0 * r),
            Shape::Rect { w, h, .. } => (*w, *h),
            Shape::Polygon(points) => {
                let span = |f: fn(&(f64, f64)) -> f64| {
                    let v: Vec<f64> = points.iter().map(f).collect();
                    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                        - v.iter().copied().fold(f64::INFINITY, f64::min)
                };
                (span(|p| p.0), span(|p| p.1))
            }
        }
    }

    /// The same figure at the same place, to half a pixel.
    fn same_as(&self, other: &Shape) -> bool {
        let near = |a: f64, b: f64| (a - b).abs() <= 0.5;
        match (self, other) {
            (Shape::Circle { x, y, r }, Shape::Circle { x: u, y: v, r: s }) => {
                near(*x, *u) && near(*y, *v) && near(*r, *s)
            }
            (Shape::Polygon(a), Shape::Polygon(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|(p, q)| near(p.0, q.0) && near(p.1, q.1))
            }
            (
                Shape::Rect { x, y, w, h },
                Shape::Rect {
                    x: a,
                    y: b,
                    w: c,
                    h: d,
                },
            ) => near(*x, *a) && near(*y, *b) && near(*w, *c) && near(*h, *d),
            _ => false,
        }
    }
}

fn points(tag: &str) -> Vec<(f64, f64)> {
    attribute(tag, "points")
        .unwrap_or_else(|| panic!("no points in {tag}"))
        .split_whitespace()
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

/// Every marker of `svg` in drawing order: small circles, rectangles and
/// polygons, filled or outlined, and closed outlines (open polylines are
/// lines and their dashes, not markers).
fn markers(svg: &str) -> Vec<Marker> {
    let mut out = Vec::new();
    for tag in svg.split('<').skip(1) {
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        let kind = tag.split_whitespace().next().unwrap_or("");
        let shape = match kind {
            "circle" => Shape::Circle {
                x: number(tag, "cx"),
                y: number(tag, "cy"),
                r: number(tag, "r"),
            },
            "rect" => Shape::Rect {
                x: number(tag, "x"),
                y: number(tag, "y"),
                w: number(tag, "width"),
                h: number(tag, "height"),
            },
            "polygon" => Shape::Polygon(points(tag)),
            "polyline" => {
                let mut p = points(tag);
                if p.len() < 4 || p.first() != p.last() {
                    continue;
                }
                p.pop();
                Shape::Polygon(p)
            }
            _ => continue,
        };
        let (w, h) = shape.size();
        if w > MARKER_SIZE || h > MARKER_SIZE {
            continue;
        }
        let fill = attribute(tag, "fill").unwrap_or("none");
        let filled = kind != "polyline" && fill != "none";
        let opacity: f64 = attribute(tag, "opacity").map_or(1.0, |o| o.parse().unwrap());
        let colour = if filled {
            fill
        } else {
            attribute(tag, "stroke").unwrap_or("none")
        };
        out.push(Marker {
            shape,
            colour: colour.to_string(),
            opaque: filled && opacity >= 0.99,
        });
    }
    out
}

/// Every marker of `svg` that a later marker of another colour (another
/// series) hides: an opaque fill over all of it, or an outline of the
/// same figure at the same place.
fn hidden_markers(svg: &str) -> Vec<String> {
    let markers = markers(svg);
    let mut problems = Vec::new();
    for (i, under) in markers.iter().enumerate() {
        let outline = under.shape.outline();
        let cover = markers[i + 1..].iter().find(|over| {
            over.colour != under.colour
                && if over.opaque {
                    outline.iter().all(|p| over.shape.contains(*p))
                } else {
                    over.shape.same_as(&under.shape)
                }
        });
        if let Some(over) = cover {
            problems.push(format!(
                "a {} marker {:?} is hidden under a later {} marker {:?}",
                under.colour, under.shape, over.colour, over.shape
            ));
        }
    }
    problems
}

/// Whether `label` names `device` as a whole word (not `i7` in `xi7`, nor
/// `hikey970-cpu` in `hikey970-cpu2`).
fn names(label: &str, device: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_');
    label.match_indices(device).any(|(at, _)| {
        !word(label[..at].chars().next_back()) && !word(label[at + device.len()..].chars().next())
    })
}

const MARK: &str = "(modelled)";

/// Every panel, group, column, row or series of `figure` that names a
/// modelled device (one of `modelled`) without "(modelled)" in its own
/// label or its panel's title; a bar panel drawn hollow (modelled) must
/// say so in its title; and a footer that speaks of hollow marks when
/// nothing is drawn hollow, or of solid bars when some are hollow.
fn unmarked_modelled(figure: &FigureData, modelled: &[String]) -> Vec<String> {
    let unmarked = |label: &str| !label.contains(MARK) && modelled.iter().any(|d| names(label, d));
    let mut problems = Vec::new();
    let mut check = |title: &str, labels: Vec<&str>| {
        if unmarked(title) {
            problems.push(format!(
                "panel {title:?} names a modelled device without {MARK}"
            ));
        }
        if !title.contains(MARK) {
            for label in labels.into_iter().filter(|l| unmarked(l)) {
                problems.push(format!(
                    "{label:?} (in panel {title:?}) names a modelled device without {MARK}"
                ));
            }
        }
    };
    let mut untitled = Vec::new();
    let mut hollow = false;
    let mut hollow_bars = false;
    match &figure.body {
        Body::Bars(panels) => {
            for p in panels {
                if p.modelled && !p.title.contains(MARK) {
                    untitled.push(format!(
                        "hollow (modelled) panel {:?} without {MARK}",
                        p.title
                    ));
                }
                let labels = p.groups.iter().chain(p.series.iter().map(|s| &s.name));
                check(&p.title, labels.map(String::as_str).collect());
                hollow |= p.modelled;
                hollow_bars |= p.modelled;
            }
        }
        Body::Scatter(panels) => {
            for p in panels {
                check(&p.title, p.series.iter().map(|s| s.name.as_str()).collect());
                hollow |= p.series.iter().any(|s| s.modelled);
            }
        }
        Body::Heatmap(h) => check(
            "",
            h.columns
                .iter()
                .chain(&h.rows)
                .map(String::as_str)
                .collect(),
        ),
        Body::Lines { panels, .. } => {
            for p in panels {
                check(&p.title, p.series.iter().map(|s| s.name.as_str()).collect());
            }
        }
        Body::Stack(_) | Body::Matrices { .. } => {}
    }
    problems.extend(untitled);
    let footer = figure.footer.to_lowercase();
    if footer.contains("hollow") && !hollow {
        problems.push("the footer speaks of hollow marks, but nothing is drawn hollow".into());
    }
    if footer.contains("solid") && hollow_bars {
        problems.push("the footer speaks of solid bars, but some bars are hollow".into());
    }
    problems
}

/// The layout, marker and marking problems of `figures`, each named by
/// `study` and inputs.
fn check_all(
    study: &str,
    inputs_name: &str,
    inputs: &Inputs,
    figures: Vec<FigureData>,
) -> Vec<String> {
    let modelled: Vec<String> = inputs.specs.iter().map(|s| s.id.clone()).collect();
    figures
        .iter()
        .flat_map(|figure| {
            let svg = figure.svg().unwrap();
            layout_problems(&svg)
                .into_iter()
                .chain(hidden_markers(&svg))
                .chain(unmarked_modelled(figure, &modelled))
                .map(move |p| format!("{study} figure {} ({inputs_name}): {p}", figure.number))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Each study's figures from the snapshot tests' inputs (the mocked
/// devices) and from `reproduce`'s (the mocked devices and the recorded
/// host runs), so host panels are laid out too.
#[test]
fn no_text_leaves_the_canvas_or_overlaps_another() {
    let mut problems = Vec::new();
    let dlas_figures = |inputs: &Inputs| -> Vec<FigureData> {
        dlas::FIGURES
            .iter()
            .map(|&n| dlas::figure(n, inputs).unwrap())
            .collect()
    };
    common::with_inputs(|inputs| {
        problems.extend(check_all("dlas", "mocked", inputs, dlas_figures(inputs)))
    });
    common::with_results(
        &["data/results/dlas/mock.csv", "data/results/dlas/host.csv"],
        |inputs| {
            problems.extend(check_all(
                "dlas",
                "mocked and host",
                inputs,
                dlas_figures(inputs),
            ))
        },
    );
    for (name, paths) in [
        ("mocked", &["data/results/compilers/mock.csv"][..]),
        (
            "mocked and host",
            &[
                "data/results/compilers/mock.csv",
                "data/results/compilers/host.csv",
            ][..],
        ),
    ] {
        common::with_compiler_results(paths, |inputs| {
            let figures = compilers::FIGURES
                .iter()
                .map(|&n| compilers::figure(n, inputs).unwrap())
                .collect();
            problems.extend(check_all("compilers", name, inputs, figures));
        });
    }
    assert!(
        problems.is_empty(),
        "{} layout problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The committed figures (what `reproduce` wrote, and `reproduce --check`
/// keeps current) pass the same checks of their SVG.
#[test]
fn committed_figures_keep_their_texts_apart() {
    let root = common::root();
    let mut problems = Vec::new();
    for dir in ["figures", "figures/compilers"] {
        let mut paths: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "svg"))
            .collect();
        paths.sort();
        for path in paths {
            let svg = std::fs::read_to_string(&path).unwrap();
            problems.extend(
                layout_problems(&svg)
                    .into_iter()
                    .chain(hidden_markers(&svg))
                    .map(|p| format!("{}: {p}", path.display())),
            );
        }
    }
    assert!(
        problems.is_empty(),
        "{} layout problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

fn text(x: i32, y: i32, anchor: &str, extra: &str, content: &str) -> String {
    format!(
        "<text x=\"{x}\" y=\"{y}\" dy=\"0.76em\" text-anchor=\"{anchor}\" font-family=\"sans-serif\" \
         font-size=\"12.9\" opacity=\"1\" fill=\"#000000\"{extra}>\n{content}\n</text>\n"
    )
}

fn tiny_svg(texts: &[String]) -> String {
    format!(
        "<svg width=\"200\" height=\"100\" viewBox=\"0 0 200 100\" xmlns=\"http://www.w3.org/2000/svg\">\n{}</svg>\n",
        texts.concat()
    )
}

/// The checker can fail: planted overlaps and a text past the edge are
/// reported, and texts set apart are not.
#[test]
fn planted_overlaps_and_overflows_are_reported() {
    let apart = tiny_svg(&[
        text(10, 10, "start", "", "speedup"),
        text(10, 40, "start", "", "slowdown"),
        text(190, 10, "end", "", "1x"),
    ]);
    assert_eq!(layout_problems(&apart), Vec::<String>::new());

    let same_spot = tiny_svg(&[
        text(10, 10, "start", "", "speedup"),
        text(10, 10, "start", "", "slowdown"),
    ]);
    let problems = layout_problems(&same_spot);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("overlaps"), "{problems:?}");

    // The real advances tell "WWWW" (wide) from "iiii" (narrow): the first
    // reaches the text after it, the second does not.
    let wide = tiny_svg(&[
        text(10, 10, "start", "", "WWWW"),
        text(50, 10, "start", "", "x"),
    ]);
    assert_eq!(layout_problems(&wide).len(), 1);
    let narrow = tiny_svg(&[
        text(10, 10, "start", "", "iiii"),
        text(50, 10, "start", "", "x"),
    ]);
    assert_eq!(layout_problems(&narrow), Vec::<String>::new());

    // A rotated label reaching into the one beside it, and a title wider
    // than the canvas.
    let rotated = tiny_svg(&[
        text(20, 5, "start", " transform=\"rotate(90, 20, 5)\"", "group"),
        text(14, 30, "start", "", "label"),
    ]);
    assert_eq!(layout_problems(&rotated).len(), 1);
    let clipped = tiny_svg(&[text(
        100,
        5,
        "middle",
        "",
        "Figure 8: a title longer than the canvas is wide",
    )]);
    let problems = layout_problems(&clipped);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("leaves the 200 x 100 canvas"));
}

fn shape(tag: &str) -> String {
    format!("<{tag}/>\n")
}

/// The marker check can fail: a marker under an opaque one of another
/// colour, or under the same outline in another colour, is reported; one
/// that peeks out, one under a different outline, one under its own
/// series' colour, and the dashes of coinciding lines are not.
#[test]
fn planted_hidden_markers_are_reported() {
    let svg = |tags: &[String]| {
        format!(
            "<svg width=\"200\" height=\"100\" xmlns=\"http://www.w3.org/2000/svg\">\n{}</svg>\n",
            tags.concat()
        )
    };
    let dot = |x: i32, r: i32, fill: &str| {
        shape(&format!(
            "circle cx=\"{x}\" cy=\"50\" r=\"{r}\" opacity=\"1\" fill=\"{fill}\" stroke=\"none\" stroke-width=\"1\""
        ))
    };
    let ring = |r: i32, stroke: &str| {
        shape(&format!(
            "circle cx=\"50\" cy=\"50\" r=\"{r}\" opacity=\"1\" fill=\"none\" stroke=\"{stroke}\" stroke-width=\"2\""
        ))
    };
    let outline = |points: &str, stroke: &str| {
        shape(&format!(
            "polyline fill=\"none\" opacity=\"1\" stroke=\"{stroke}\" stroke-width=\"2\" points=\"{points}\""
        ))
    };
    let square = "46,46 54,46 54,54 46,54 46,46 ";
    let diamond = "50,45 55,50 50,55 45,50 50,45 ";

    // Two series' filled dots at one position: the first is hidden.
    let problems = hidden_markers(&svg(&[dot(50, 4, "#1F77B4"), dot(50, 4, "#FF7F0E")]));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("#1F77B4"), "{problems:?}");
    // A larger dot drawn over a smaller one hides it; a smaller one does not.
    assert_eq!(
        hidden_markers(&svg(&[dot(50, 3, "#1F77B4"), dot(51, 5, "#FF7F0E")])).len(),
        1
    );
    assert!(hidden_markers(&svg(&[dot(50, 5, "#1F77B4"), dot(50, 3, "#FF7F0E")])).is_empty());
    // The same series twice, or dots apart, hide nothing of another series.
    assert!(hidden_markers(&svg(&[dot(50, 4, "#1F77B4"), dot(50, 4, "#1F77B4")])).is_empty());
    assert!(hidden_markers(&svg(&[dot(40, 4, "#1F77B4"), dot(60, 4, "#FF7F0E")])).is_empty());
    // Outlines: the same figure over another's hides it; a different
    // figure at the same place, or a filled but faint one, does not.
    assert_eq!(
        hidden_markers(&svg(&[
            outline(square, "#1F77B4"),
            outline(square, "#2CA02C")
        ]))
        .len(),
        1
    );
    assert_eq!(
        hidden_markers(&svg(&[ring(4, "#1F77B4"), ring(4, "#2CA02C")])).len(),
        1
    );
    assert!(
        hidden_markers(&svg(&[
            outline(square, "#1F77B4"),
            outline(diamond, "#2CA02C")
        ]))
        .is_empty()
    );
    let faint = shape(
        "circle cx=\"50\" cy=\"50\" r=\"9\" opacity=\"0.3\" fill=\"#2CA02C\" stroke=\"none\" stroke-width=\"1\"",
    );
    assert!(hidden_markers(&svg(&[outline(square, "#1F77B4"), faint])).is_empty());
    // An opaque filled polygon over an outline inside it hides it.
    let big_square =
        shape("polygon points=\"44,44 56,44 56,56 44,56 \" opacity=\"1\" fill=\"#D62728\"");
    assert_eq!(
        hidden_markers(&svg(&[outline(diamond, "#1F77B4"), big_square])).len(),
        1
    );
    // Open polylines (dashes of two coinciding lines) are not markers.
    let dash = |stroke: &str| outline("40,50 48,50 ", stroke);
    assert!(hidden_markers(&svg(&[dash("#1F77B4"), dash("#2CA02C")])).is_empty());
}

/// The renderer and the check together: a scatter series that shares its
/// points and, being the ninth, its marker shape with the first (the
/// shapes come round every eight series) hides it, filled or outlined; the
/// second series at the same points, of another shape, hides nothing.
#[test]
fn a_planted_series_under_another_is_reported_from_the_rendered_figure() {
    use dlas_report::figure::{Point, ScatterPanel, ScatterSeries};
    let points = vec![
        Point {
            label: "a".into(),
            x: 2.0,
            y: 1.5,
        },
        Point {
            label: "b".into(),
            x: 3.0,
            y: 1.2,
        },
    ];
    let series = |i: usize, twin: usize, modelled: bool| ScatterSeries {
        name: format!("device{i}"),
        points: if i == 0 || i == twin {
            points.clone()
        } else {
            vec![Point {
                label: "c".into(),
                x: 1.0 + i as f64,
                y: 0.5,
            }]
        },
        modelled,
    };
    let figure = |twin: usize, modelled: bool| FigureData {
        number: 99,
        title: "planted".into(),
        y_label: "achieved".into(),
        log_y: true,
        body: Body::Scatter(vec![ScatterPanel {
            title: "all devices".into(),
            x_label: "expected".into(),
            series: (0..9).map(|i| series(i, twin, modelled)).collect(),
            diagonal: None,
            band: None,
        }]),
        footer: String::new(),
    };
    for modelled in [false, true] {
        let problems = hidden_markers(&figure(8, modelled).svg().unwrap());
        assert_eq!(problems.len(), 2, "{problems:?}");
        let problems = hidden_markers(&figure(1, modelled).svg().unwrap());
        assert_eq!(problems, Vec::<String>::new());
    }
}

/// The marking check can fail: the committed figures with their
/// "(modelled)" marks taken out (Figure 6's columns, as they were before
/// the heatmap marked them; Figure 7's legend) are reported, and so is a
/// footer about hollow bars under solid ones (the compiler study's Figure 7
/// as it was); the figures as drawn are not.
#[test]
fn planted_unmarked_modelled_data_is_reported() {
    common::with_results(
        &["data/results/dlas/mock.csv", "data/results/dlas/host.csv"],
        |inputs| {
            let modelled: Vec<String> = inputs.specs.iter().map(|s| s.id.clone()).collect();
            let strip = |label: &mut String| *label = label.replace(" (modelled)", "");
            let mut heatmap = dlas::figure(6, inputs).unwrap();
            assert_eq!(unmarked_modelled(&heatmap, &modelled), Vec::<String>::new());
            let Body::Heatmap(h) = &mut heatmap.body else {
                panic!("Figure 6 is a heatmap")
            };
            h.columns.iter_mut().for_each(strip);
            let problems = unmarked_modelled(&heatmap, &modelled);
            assert!(
                problems.len() >= 4
                    && problems
                        .iter()
                        .all(|p| p.contains("untuned") || p.contains("tuned")),
                "{problems:?}"
            );

            let mut scatter = dlas::figure(7, inputs).unwrap();
            assert_eq!(unmarked_modelled(&scatter, &modelled), Vec::<String>::new());
            let Body::Scatter(panels) = &mut scatter.body else {
                panic!("Figure 7 is a scatter plot")
            };
            panels[0].series.iter_mut().for_each(|s| strip(&mut s.name));
            let problems = unmarked_modelled(&scatter, &modelled);
            assert!(
                problems.iter().any(|p| p.contains("\"i7\"")),
                "{problems:?}"
            );
            // Drawn alike: the footer's hollow markers are not there.
            let Body::Scatter(panels) = &mut scatter.body else {
                unreachable!()
            };
            for s in &mut panels[0].series {
                s.modelled = false;
            }
            let problems = unmarked_modelled(&scatter, &modelled);
            assert!(
                problems.iter().any(|p| p.contains("hollow")),
                "{problems:?}"
            );

            let mut bars = dlas::figure(5, inputs).unwrap();
            assert_eq!(unmarked_modelled(&bars, &modelled), Vec::<String>::new());
            let Body::Bars(panels) = &mut bars.body else {
                panic!("Figure 5 is bars")
            };
            strip(&mut panels[0].title);
            let problems = unmarked_modelled(&bars, &modelled);
            assert!(problems.len() >= 2, "{problems:?}");
        },
    );
    common::with_compiler_results(
        &[
            "data/results/compilers/mock.csv",
            "data/results/compilers/host.csv",
        ],
        |inputs| {
            let modelled: Vec<String> = inputs.specs.iter().map(|s| s.id.clone()).collect();
            let mut metrics = compilers::figure(7, inputs).unwrap();
            assert_eq!(unmarked_modelled(&metrics, &modelled), Vec::<String>::new());
            metrics.footer = format!("Modelled: hollow bars. {}", metrics.footer);
            let problems = unmarked_modelled(&metrics, &modelled);
            assert!(
                problems.iter().any(|p| p.contains("hollow")),
                "{problems:?}"
            );
            let Body::Bars(panels) = &mut metrics.body else {
                panic!("Figure 7 is bars")
            };
            for group in &mut panels[0].groups {
                *group = group.replace(" (modelled)", "");
            }
            let problems = unmarked_modelled(&metrics, &modelled);
            assert!(
                problems.iter().any(|p| p.contains("orin-gpu")),
                "{problems:?}"
            );
        },
    );
}
