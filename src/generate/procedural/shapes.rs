//! Path and gradient helpers: circles, ovals, rectangles, polygons, linear and
//! radial gradient shaders, and rotate-then-translate transforms.

use tiny_skia::{
    GradientStop, LinearGradient, Path, PathBuilder, Point, RadialGradient, Rect, Shader,
    SpreadMode, Transform,
};

use super::color::Rgb;
use super::rng::{cos, sin};

pub(super) fn circle(x: f32, y: f32, r: f32) -> Option<Path> {
    PathBuilder::from_circle(x, y, r.max(0.05))
}

pub(super) fn oval(x: f32, y: f32, rx: f32, ry: f32) -> Option<Path> {
    Rect::from_xywh(x - rx, y - ry, 2.0 * rx.max(0.05), 2.0 * ry.max(0.05))
        .and_then(PathBuilder::from_oval)
}

pub(super) fn rect(x: f32, y: f32, w: f32, h: f32) -> Option<Path> {
    Rect::from_xywh(x, y, w.max(0.05), h.max(0.05)).map(PathBuilder::from_rect)
}

pub(super) fn polygon(pts: &[(f32, f32)]) -> Option<Path> {
    let mut pb = PathBuilder::new();
    for (i, &(x, y)) in pts.iter().enumerate() {
        if i == 0 {
            pb.move_to(x, y);
        } else {
            pb.line_to(x, y);
        }
    }
    pb.close();
    pb.finish()
}

pub(super) fn stops(list: &[(f32, Rgb, f32)]) -> Vec<GradientStop> {
    list.iter()
        .map(|&(p, c, a)| GradientStop::new(p, c.color(a)))
        .collect()
}

pub(super) fn linear(
    p0: (f32, f32),
    p1: (f32, f32),
    list: &[(f32, Rgb, f32)],
) -> Option<Shader<'static>> {
    LinearGradient::new(
        Point::from_xy(p0.0, p0.1),
        Point::from_xy(p1.0, p1.1),
        stops(list),
        SpreadMode::Pad,
        Transform::identity(),
    )
}

pub(super) fn radial(c: (f32, f32), r: f32, list: &[(f32, Rgb, f32)]) -> Option<Shader<'static>> {
    let p = Point::from_xy(c.0, c.1);
    RadialGradient::new(p, p, r, stops(list), SpreadMode::Pad, Transform::identity())
}

/// Rotation by `a` radians then translation to (x, y).
pub(super) fn place(a: f32, x: f32, y: f32) -> Transform {
    let (s, c) = (sin(a), cos(a));
    Transform::from_row(c, s, -s, c, x, y)
}
