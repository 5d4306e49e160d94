//! Pan and outpaint: a larger canvas with the parent (as it is, or scaled) placed on it and the
//! new area drawn around it. The surroundings continue the scene: near the parent they mirror
//! it across the seam (so colours and lines carry on without a visible cut), the mirror image
//! wanders with a seeded, distance-growing wobble, and with distance it fades into `fill` (the
//! prompt rendered at the canvas size) or, without one, into a soft, seeded colour field taken
//! from the parent's own colours.

use std::borrow::Cow;

use crate::images::RgbaImage;

use super::{fractal_noise, hash, resize, sample_bilinear, smoothstep, to_u8, usable, Direction};

/// The output size of a pan of a `w` x `h` parent: the panned side grows by half, rounded up
/// to an even total (0 stays 0).
pub fn pan_size(w: u32, h: u32, direction: Direction) -> (u32, u32) {
    let grow = |n: u32| -> u32 {
        let t = u64::from(n) + u64::from(n / 2);
        (t + (t & 1)).min(u64::from(u32::MAX - 1)) as u32
    };
    match direction {
        Direction::Left | Direction::Right => (grow(w), h),
        Direction::Up | Direction::Down => (w, grow(h)),
    }
}

/// The parent extended by half its size toward `direction`, its own pixels copied unchanged
/// (Left: at the right edge; Right: at x = 0; Up: at the bottom; Down: at y = 0). The new strip
/// continues the scene and fades into `fill` toward the far edge; `k` varies it.
pub fn pan(
    parent: &RgbaImage,
    direction: Direction,
    fill: Option<&RgbaImage>,
    seed: u64,
    k: u32,
) -> RgbaImage {
    let (ow, oh) = pan_size(parent.width, parent.height, direction);
    if !usable(parent) {
        return background(ow, oh, fill);
    }
    let (pw, ph) = (parent.width, parent.height);
    let (x0, y0, fade) = match direction {
        Direction::Left => (ow.saturating_sub(pw), 0, ow.saturating_sub(pw)),
        Direction::Right => (0, 0, ow.saturating_sub(pw)),
        Direction::Up => (0, oh.saturating_sub(ph), oh.saturating_sub(ph)),
        Direction::Down => (0, 0, oh.saturating_sub(ph)),
    };
    let s = hash(seed, &[0x0070_616e, direction as u64, u64::from(k)]);
    surround(parent, ow, oh, x0, y0, fade as f32, fill, s)
}

/// Where [`outpaint`] places the scaled parent on an `out_w` x `out_h` canvas: (x, y, sw, sh),
/// centred, with scale min(out_w / pw, out_h / ph) / zoom, zoom clamped to [1, 2] (NaN counts
/// as 1). sw and sh are at least 1 and at most the canvas (when the canvas is not empty).
pub fn outpaint_placement(
    pw: u32,
    ph: u32,
    out_w: u32,
    out_h: u32,
    zoom: f64,
) -> (u32, u32, u32, u32) {
    let zoom = if zoom.is_nan() {
        1.0
    } else {
        zoom.clamp(1.0, 2.0)
    };
    let (pwf, phf) = (f64::from(pw.max(1)), f64::from(ph.max(1)));
    let scale = (f64::from(out_w) / pwf).min(f64::from(out_h) / phf) / zoom;
    let sw = ((pwf * scale).round() as u64).clamp(1, u64::from(out_w.max(1))) as u32;
    let sh = ((phf * scale).round() as u64).clamp(1, u64::from(out_h.max(1))) as u32;
    (
        out_w.saturating_sub(sw) / 2,
        out_h.saturating_sub(sh) / 2,
        sw,
        sh,
    )
}

/// An `out_w` x `out_h` canvas with `resize(parent, sw, sh)` placed, unchanged, at the spot
/// [`outpaint_placement`] gives, and the surroundings drawn outward from it, fading into `fill`;
/// `k` varies them.
pub fn outpaint(
    parent: &RgbaImage,
    out_w: u32,
    out_h: u32,
    zoom: f64,
    fill: Option<&RgbaImage>,
    seed: u64,
    k: u32,
) -> RgbaImage {
    if out_w == 0 || out_h == 0 || !usable(parent) {
        return background(out_w, out_h, fill);
    }
    let (x, y, sw, sh) = outpaint_placement(parent.width, parent.height, out_w, out_h, zoom);
    let placed = resize(parent, sw, sh);
    let margin = x.max(y).max(out_w - x - sw).max(out_h - y - sh).max(1);
    let s = hash(seed, &[0x006f_7574_7061_696e, u64::from(k)]);
    surround(&placed, out_w, out_h, x, y, margin as f32, fill, s)
}

/// What a canvas holds when there is no parent to extend: the fill at the canvas size, or
/// opaque black.
fn background(w: u32, h: u32, fill: Option<&RgbaImage>) -> RgbaImage {
    match fill {
        _ if w == 0 || h == 0 => RgbaImage {
            width: w,
            height: h,
            data: Vec::new(),
        },
        Some(f) if usable(f) => resize(f, w, h),
        _ => RgbaImage::new(w, h),
    }
}

/// Mirror a continuous coordinate into [0, n): reflection across both edges, repeated.
fn mirror(v: f32, n: f32) -> f32 {
    let m = v.rem_euclid(2.0 * n);
    if m < n {
        m
    } else {
        2.0 * n - m
    }
}

/// A `ow` x `oh` canvas with `placed` copied at (x0, y0) and everything else continued from
/// it: a mirror image that wobbles more with distance, fading over `fade` pixels into `fill`
/// (resized to the canvas if need be) or into a soft colour field made from `placed`.
#[allow(clippy::too_many_arguments)]
fn surround(
    placed: &RgbaImage,
    ow: u32,
    oh: u32,
    x0: u32,
    y0: u32,
    fade: f32,
    fill: Option<&RgbaImage>,
    s: u64,
) -> RgbaImage {
    let fill: Option<Cow<'_, RgbaImage>> = fill.filter(|f| usable(f)).map(|f| {
        if (f.width, f.height) == (ow, oh) {
            Cow::Borrowed(f)
        } else {
            Cow::Owned(resize(f, ow, oh))
        }
    });
    // A few pixels of the parent's colours, sampled smoothly: the fallback far field.
    let soft = resize(placed, placed.width.min(6), placed.height.min(6));
    let (sw, sh) = (placed.width as f32, placed.height as f32);
    let (softx, softy) = (soft.width as f32 / sw, soft.height as f32 / sh);
    let fade = fade.max(1.0);
    // Wobble features about half the fade distance across, never tiny.
    let wave = (fade * 0.5).max(6.0);
    let (pw, ph) = (placed.width as usize, placed.height as usize);
    let (x0u, y0u) = (x0 as usize, y0 as usize);
    let mut out = RgbaImage::new(ow, oh);
    for y in 0..oh as usize {
        for x in 0..ow as usize {
            let o = (y * ow as usize + x) * 4;
            let inside_x = x >= x0u && x < x0u + pw;
            let inside_y = y >= y0u && y < y0u + ph;
            if inside_x && inside_y {
                let i = ((y - y0u) * pw + (x - x0u)) * 4;
                out.data[o..o + 4].copy_from_slice(&placed.data[i..i + 4]);
                continue;
            }
            let lx = x as f32 - x0 as f32 + 0.5;
            let ly = y as f32 - y0 as f32 + 0.5;
            let dx = if lx < 0.0 { -lx } else { (lx - sw).max(0.0) };
            let dy = if ly < 0.0 { -ly } else { (ly - sh).max(0.0) };
            let d = (dx * dx + dy * dy).sqrt();
            let (u, v) = (x as f32 / wave, y as f32 / wave);
            let amt = d.min(fade) * 0.4;
            let wx = fractal_noise(s ^ 1, u, v) * amt;
            let wy = fractal_noise(s ^ 2, u + 17.3, v - 4.1) * amt;
            let (mx, my) = (mirror(lx + wx, sw), mirror(ly + wy, sh));
            let refl = sample_bilinear(placed, mx, my);
            let shade = fractal_noise(s ^ 3, u * 0.8, v * 0.8);
            let target = match &fill {
                Some(f) => {
                    let i = o;
                    [
                        f32::from(f.data[i]),
                        f32::from(f.data[i + 1]),
                        f32::from(f.data[i + 2]),
                        f32::from(f.data[i + 3]),
                    ]
                }
                None => {
                    let fx = mirror(lx + wx * 2.0, sw) * softx;
                    let fy = mirror(ly + wy * 2.0, sh) * softy;
                    let c = sample_bilinear(&soft, fx, fy);
                    let b = shade * 14.0;
                    [c[0] + b, c[1] + b, c[2] + b, c[3]]
                }
            };
            let t = smoothstep(d / fade * (1.15 + fractal_noise(s ^ 4, u, v) * 0.3));
            // The mirror image darkens and lightens a little with distance, per k.
            let b = shade * 8.0 * smoothstep(d / fade);
            for c in 0..3 {
                out.data[o + c] = to_u8((refl[c] + b) * (1.0 - t) + target[c] * t);
            }
            out.data[o + 3] = to_u8(refl[3] * (1.0 - t) + target[3] * t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{mean_abs_diff, scene, scene_of, solid};
    use super::*;

    fn region(img: &RgbaImage, x0: u32, y0: u32, w: u32, h: u32) -> RgbaImage {
        let mut data = Vec::new();
        for y in y0..y0 + h {
            let o = ((y * img.width + x0) * 4) as usize;
            data.extend_from_slice(&img.data[o..o + (w * 4) as usize]);
        }
        RgbaImage {
            width: w,
            height: h,
            data,
        }
    }

    #[test]
    fn pan_sizes() {
        assert_eq!(pan_size(1024, 1024, Direction::Left), (1536, 1024));
        assert_eq!(pan_size(1024, 576, Direction::Up), (1024, 864));
        assert_eq!(pan_size(682, 1024, Direction::Right), (1024, 1024));
        assert_eq!(pan_size(5, 3, Direction::Down), (5, 4));
        assert_eq!(pan_size(5, 5, Direction::Down), (5, 8));
        assert_eq!(pan_size(1, 1, Direction::Right), (2, 1));
        assert_eq!(pan_size(0, 0, Direction::Left), (0, 0));
        for n in 0..50 {
            assert_eq!(pan_size(n, 7, Direction::Left).0 % 2, 0);
            assert!(pan_size(n, 7, Direction::Left).0 >= n + n / 2);
        }
        let big = pan_size(u32::MAX, 1, Direction::Left);
        assert_eq!(big.0 % 2, 0);
    }

    #[test]
    fn pan_keeps_the_parent_in_place() {
        let parent = scene(64, 48);
        let fill = scene_of("a lighthouse on a rocky coast at sunset", 96, 48);
        for (dir, x, y) in [
            (Direction::Left, 32, 0),
            (Direction::Right, 0, 0),
            (Direction::Up, 0, 24),
            (Direction::Down, 0, 0),
        ] {
            let (w, h) = pan_size(64, 48, dir);
            let fill = resize(&fill, w, h);
            for f in [Some(&fill), None] {
                let out = pan(&parent, dir, f, 4, 1);
                assert_eq!((out.width, out.height), (w, h));
                assert_eq!(region(&out, x, y, 64, 48), parent, "{dir:?}");
            }
        }
    }

    #[test]
    fn pan_strip_continues_and_varies_by_k() {
        let parent = scene(64, 48);
        let a = pan(&parent, Direction::Right, None, 4, 0);
        let b = pan(&parent, Direction::Right, None, 4, 1);
        assert_eq!(a, pan(&parent, Direction::Right, None, 4, 0));
        let (sa, sb) = (region(&a, 64, 0, 32, 48), region(&b, 64, 0, 32, 48));
        assert!(mean_abs_diff(&sa, &sb) > 1.0);
        // Next to the seam the strip looks like the parent's edge.
        let seam = region(&a, 64, 0, 1, 48);
        let edge = region(&parent, 63, 0, 1, 48);
        assert!(mean_abs_diff(&seam, &edge) < 12.0);
        // With a fill, the far edge is mostly the fill.
        let fill = solid(96, 48, [0, 255, 0, 255]);
        let c = pan(&parent, Direction::Right, Some(&fill), 4, 0);
        let far = region(&c, 95, 0, 1, 48);
        assert!(mean_abs_diff(&far, &solid(1, 48, [0, 255, 0, 255])) < 20.0);
    }

    #[test]
    fn outpaint_centre_is_the_resized_parent() {
        let parent = scene(64, 48);
        for (w, h, zoom) in [(64, 48, 2.0), (64, 48, 1.5), (96, 96, 1.0), (50, 80, 1.3)] {
            let (x, y, sw, sh) = outpaint_placement(64, 48, w, h, zoom);
            let out = outpaint(&parent, w, h, zoom, None, 1, 0);
            assert_eq!((out.width, out.height), (w, h));
            assert_eq!(region(&out, x, y, sw, sh), resize(&parent, sw, sh));
        }
        assert_eq!(outpaint_placement(64, 48, 64, 48, 2.0), (16, 12, 32, 24));
        assert_eq!(outpaint_placement(64, 48, 64, 48, 9.0), (16, 12, 32, 24));
        assert_eq!(outpaint_placement(64, 48, 64, 48, 0.5), (0, 0, 64, 48));
        assert_eq!(outpaint_placement(0, 0, 0, 0, f64::NAN), (0, 0, 1, 1));
        let fill = scene_of("wide open sea", 64, 48);
        let a = outpaint(&parent, 64, 48, 2.0, Some(&fill), 1, 0);
        let b = outpaint(&parent, 64, 48, 2.0, Some(&fill), 1, 3);
        assert_ne!(a, b);
        assert_eq!(a, outpaint(&parent, 64, 48, 2.0, Some(&fill), 1, 0));
    }

    #[test]
    fn degenerate_inputs() {
        let empty = RgbaImage::new(0, 0);
        assert_eq!(pan(&empty, Direction::Left, None, 0, 0).data.len(), 0);
        assert_eq!(
            outpaint(&empty, 8, 8, 1.0, None, 0, 0),
            RgbaImage::new(8, 8)
        );
        assert_eq!(outpaint(&scene(8, 8), 0, 5, 1.0, None, 0, 0).data.len(), 0);
        let one = pan(&solid(1, 1, [5, 6, 7, 255]), Direction::Up, None, 0, 0);
        assert_eq!((one.width, one.height), (1, 2));
        let thin = outpaint(&scene(300, 2), 64, 64, 1.0, None, 0, 0);
        assert_eq!(thin.data.len(), 64 * 64 * 4);
    }
}
