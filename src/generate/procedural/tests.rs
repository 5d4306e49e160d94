//! Tests for the procedural generator: determinism, variety, palette steering,
//! sizes, odd prompts and the vocabulary.

use super::rng::{cos, sin};
use super::vocab::{lookup, lookup_word};
use super::*;

/// Mean absolute difference per channel (RGB), 0..=255.
fn mad(a: &RgbaImage, b: &RgbaImage) -> f64 {
    assert_eq!((a.width, a.height), (b.width, b.height));
    let sum: u64 = a
        .data
        .chunks_exact(4)
        .zip(b.data.chunks_exact(4))
        .map(|(p, q)| (0..3).map(|c| u64::from(p[c].abs_diff(q[c]))).sum::<u64>())
        .sum();
    sum as f64 / (a.data.len() / 4 * 3) as f64
}

fn mean_channel(img: &RgbaImage, c: usize) -> f64 {
    let sum: u64 = img.data.chunks_exact(4).map(|p| u64::from(p[c])).sum();
    sum as f64 / (img.data.len() / 4) as f64
}

fn assert_well_formed(img: &RgbaImage, w: u32, h: u32) {
    assert_eq!((img.width, img.height), (w, h));
    assert_eq!(img.data.len(), w as usize * h as usize * 4);
}

#[test]
fn render_is_deterministic() {
    for prompt in [
        "a red sunset over the ocean",
        "",
        "cat",
        "🙂 geometric cubes",
    ] {
        for v in 0..4 {
            let a = render(prompt, 99, v, 96, 64);
            let b = render(prompt, 99, v, 96, 64);
            assert_eq!(a, b, "prompt {prompt:?} variant {v}");
        }
    }
}

#[test]
fn output_is_opaque_straight_rgba() {
    let img = render("abstract bubbles", 3, 0, 80, 80);
    assert!(img.data.chunks_exact(4).all(|p| p[3] == 255));
}

// Identical renders give 0, and anti-aliasing or a few moved shapes give
// well under 2; two layouts of one theme (different horizon, sun, ridges,
// trees...) land around 10-40. A threshold of 6 (2.4% of full scale on
// every pixel and channel, on average) only passes when the layout really
// differs, yet leaves room for themes with a shared background gradient.
const VARIANT_MIN_MAD: f64 = 6.0;

#[test]
fn variants_differ_substantially() {
    for prompt in [
        "a red sunset over the ocean",
        "a green forest with tall trees",
        "minimal white circle on black",
        "a cat sitting on a windowsill",
    ] {
        let imgs: Vec<RgbaImage> = (0..4).map(|v| render(prompt, 5, v, 128, 128)).collect();
        for i in 0..4 {
            for j in i + 1..4 {
                let d = mad(&imgs[i], &imgs[j]);
                assert!(
                    d > VARIANT_MIN_MAD,
                    "{prompt:?}: variants {i} and {j} differ by only {d:.2}"
                );
            }
        }
    }
}

#[test]
fn different_prompts_differ_substantially() {
    let a = render("a red sunset over the ocean", 1, 0, 128, 128);
    let b = render("a green forest with tall trees", 1, 0, 128, 128);
    let d = mad(&a, &b);
    // Different themes change most pixels' colour, not just the layout.
    assert!(d > 25.0, "sunset vs forest differ by only {d:.2}");
    // Unknown words still give distinct pictures.
    let c = render("zorblax quiffle", 1, 0, 128, 128);
    let e = render("plimwick dravot", 1, 0, 128, 128);
    assert!(mad(&c, &e) > VARIANT_MIN_MAD);
}

#[test]
fn seed_changes_the_image() {
    let a = render("snowy mountains under a blue sky", 1, 0, 128, 128);
    let b = render("snowy mountains under a blue sky", 2, 0, 128, 128);
    let d = mad(&a, &b);
    assert!(d > VARIANT_MIN_MAD, "seeds 1 and 2 differ by only {d:.2}");
}

#[test]
fn colour_words_steer_the_palette() {
    for seed in 0..4 {
        let red = render("red", seed, seed as u32, 96, 96);
        let blue = render("blue", seed, seed as u32, 96, 96);
        assert!(
            mean_channel(&red, 0) > mean_channel(&blue, 0) + 20.0,
            "seed {seed}: red prompt is not redder"
        );
        assert!(
            mean_channel(&blue, 2) > mean_channel(&red, 2) + 20.0,
            "seed {seed}: blue prompt is not bluer"
        );
    }
}

#[test]
fn sizes_are_respected() {
    for (w, h) in [
        (2, 2),
        (3, 7),
        (7, 3),
        (1, 1),
        (1, 9),
        (17, 5),
        (256, 64),
        (2, 4096),
        (4096, 2),
    ] {
        for v in 0..4 {
            let img = render("a red sunset over the ocean", 7, v, w, h);
            assert_well_formed(&img, w, h);
        }
    }
    // The largest supported size.
    let big = render("minimal white circle on black", 1, 0, 4096, 4096);
    assert_well_formed(&big, 4096, 4096);
    // Zero sizes cannot be drawn but still give a well-formed (empty) image.
    assert_well_formed(&render("x", 0, 0, 0, 5), 0, 5);
    assert_well_formed(&render("x", 0, 0, 0, 0), 0, 0);
}

#[test]
fn odd_prompts_do_not_panic() {
    let long = "cyberpunk city ".repeat(300);
    let unknown: String = (0..4000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let prompts = [
        "",
        " ",
        "🙂🔥🌊🐈",
        "\u{0}\u{1}\t\r\n\u{7f}",
        "ÉLÉPHANT über ß straße 東京 夜",
        "\u{202e}rtl override \u{200b}zero width",
        long.as_str(),
        unknown.as_str(),
        "--- !!! 1234 5678",
    ];
    for p in prompts {
        for v in [0, 3, 7, u32::MAX] {
            let img = render(p, u64::MAX, v, 33, 21);
            assert_well_formed(&img, 33, 21);
        }
    }
}

#[test]
fn every_vocabulary_subject_renders() {
    // One prompt per subject and mood so every drawing routine runs,
    // including at tiny and lopsided sizes.
    let prompts = [
        "sun moon planet orb stars nebula",
        "mountains hills dunes city house",
        "ocean boat trees pines palms grass flowers",
        "clouds rain snow leaves lights fire",
        "cat dog animal bird fish portrait window",
        "geometric grid cubes triangles hexagon spiral stripes dots bubbles hearts blob ring arc",
        "minimal calm chaotic abstract neon pastel monochrome dark bright muted tall",
        "synthwave sunset grid",
    ];
    for p in prompts {
        for (w, h) in [(64, 64), (2, 2), (200, 3), (3, 200)] {
            assert_well_formed(&render(p, 11, 2, w, h), w, h);
        }
    }
}

#[test]
fn vocabulary_is_large() {
    let words = [
        "red",
        "crimson",
        "gold",
        "teal",
        "purple",
        "pastel",
        "neon",
        "monochrome",
        "dark",
        "bright",
        "sunset",
        "ocean",
        "sea",
        "wave",
        "forest",
        "jungle",
        "desert",
        "night",
        "space",
        "galaxy",
        "fire",
        "lava",
        "snow",
        "ice",
        "winter",
        "autumn",
        "cyberpunk",
        "sun",
        "moon",
        "planet",
        "circle",
        "mountain",
        "hill",
        "city",
        "skyline",
        "building",
        "tree",
        "flower",
        "star",
        "river",
        "cloud",
        "rain",
        "cat",
        "dog",
        "bird",
        "animal",
        "portrait",
        "face",
        "geometric",
        "cube",
        "grid",
        "minimal",
        "chaotic",
        "busy",
        "calm",
        "abstract",
        "landscape",
    ];
    for w in words {
        assert!(lookup_word(w).is_some_and(|t| !t.is_empty()), "{w} unknown");
    }
    assert_eq!(lookup_word("trees"), lookup("tree"));
    assert_eq!(lookup_word("mountains"), lookup("mountain"));
    assert_eq!(lookup_word("snowy"), lookup("snow"));
}

#[test]
fn trig_is_accurate() {
    for i in -100..=100 {
        let x = i as f32 * 0.173;
        assert!((sin(x) - x.sin()).abs() < 1e-4, "sin({x})");
        assert!((cos(x) - x.cos()).abs() < 1e-4, "cos({x})");
    }
    assert_eq!(sin(f32::NAN), 0.0);
}

// ---------------------------------------------------------------------------
// The prompt's parameters: --tile, --no, --chaos.

/// Mean absolute difference per channel (RGB) between column `a` and column `b`, or between
/// rows when `rows`.
fn line_mad(img: &RgbaImage, a: u32, b: u32, rows: bool) -> f64 {
    let (n, px) = if rows {
        (
            img.width,
            Box::new(|i: u32, l: u32| (i, l)) as Box<dyn Fn(u32, u32) -> (u32, u32)>,
        )
    } else {
        (
            img.height,
            Box::new(|i: u32, l: u32| (l, i)) as Box<dyn Fn(u32, u32) -> (u32, u32)>,
        )
    };
    let at = |(x, y): (u32, u32)| (y as usize * img.width as usize + x as usize) * 4;
    let mut sum = 0u64;
    for i in 0..n {
        let (p, q) = (at(px(i, a)), at(px(i, b)));
        sum += (0..3)
            .map(|c| u64::from(img.data[p + c].abs_diff(img.data[q + c])))
            .sum::<u64>();
    }
    sum as f64 / (n as usize * 3) as f64
}

/// The wrap seam (last line against the first), and the larger of the steps beside it (between
/// the last two lines, and the first two): where the picture continues, the seam is one more
/// such step.
fn seam_and_step(img: &RgbaImage, rows: bool) -> (f64, f64) {
    let len = if rows { img.height } else { img.width };
    let seam = line_mad(img, len - 1, 0, rows);
    let step = line_mad(img, len - 2, len - 1, rows).max(line_mad(img, 0, 1, rows));
    (seam, step)
}

#[test]
fn tile_makes_opposite_edges_continue_each_other() {
    let tile = Look {
        tile: true,
        ..Look::default()
    };
    let (mut plain_seams, mut tiled_seams) = (0.0, 0.0);
    for prompt in [
        "a red sunset over the ocean",
        "a green forest with tall trees",
        "a city at night with neon lights",
        "colorful geometric cubes and spirals",
    ] {
        for (w, h) in [(96, 64), (64, 96)] {
            let plain = render(prompt, 5, 1, w, h);
            let tiled = render_look(prompt, 5, 1, w, h, &tile);
            assert_well_formed(&tiled, w, h);
            assert!(tiled.data.chunks_exact(4).all(|p| p[3] == 255));
            for rows in [false, true] {
                let (seam, step) = seam_and_step(&tiled, rows);
                // Across the wrap, the tile changes no more than between neighbours inside it.
                assert!(
                    seam <= 2.0 * step + 1.0,
                    "{prompt:?} {w}x{h} rows={rows}: seam {seam:.2}, step {step:.2}"
                );
                tiled_seams += seam;
                plain_seams += seam_and_step(&plain, rows).0;
            }
        }
    }
    // Without --tile the edges do not meet: its seams measure about five times the tiles'.
    assert!(
        plain_seams > 3.0 * tiled_seams,
        "plain seams {plain_seams:.1}, tiled {tiled_seams:.1}"
    );
}

/// The subjects drawn for `prompt` without what `without` names.
fn subjects_of(prompt: &str, without: &str) -> Vec<vocab::Subj> {
    let theme = theme::Theme::parse_without(prompt, without);
    let pal = Palette::build(&theme, 1, 0);
    let pm = Pixmap::new(64, 64).unwrap();
    let mut art = Art::new(pm, Rng(1), pal, theme.m);
    art.choose_subjects(&theme).0
}

#[test]
fn no_leaves_out_what_it_names() {
    use vocab::Subj;
    let prompt = "a cat and a dog under the moon";
    let all = subjects_of(prompt, "");
    assert!(
        [Subj::Cat, Subj::Dog, Subj::Moon]
            .iter()
            .all(|s| all.contains(s)),
        "{all:?}"
    );
    let without = subjects_of(prompt, "dogs");
    assert!(!without.contains(&Subj::Dog), "{without:?}");
    assert!(
        without.contains(&Subj::Cat) && without.contains(&Subj::Moon),
        "{without:?}"
    );
    // Whatever else would bring the subject in: a window's view, another word for it, or the
    // shape picked when nothing named is left.
    let view = subjects_of("a window", "");
    assert!(view.contains(&Subj::Hills), "{view:?}");
    assert!(!subjects_of("a window", "hills").contains(&Subj::Hills));
    let alone = subjects_of("a cat", "cat, blobs, rings, triangles");
    assert_eq!(alone.len(), 1, "{alone:?}");
    assert!(![Subj::Cat, Subj::Blobs, Subj::Rings, Subj::Triangles].contains(&alone[0]));
    // And the picture is another one.
    let look = Look {
        without: "dog".into(),
        ..Look::default()
    };
    assert!(
        mad(
            &render(prompt, 3, 0, 96, 96),
            &render_look(prompt, 3, 0, 96, 96, &look)
        ) > 1.0
    );
}

/// Mean difference between the four images of a grid.
fn spread(prompt: &str, seed: u64, chaos: u32) -> f64 {
    let look = Look {
        chaos,
        ..Look::default()
    };
    let imgs: Vec<RgbaImage> = (0..4)
        .map(|v| render_look(prompt, seed, v, 96, 96, &look))
        .collect();
    let mut sum = 0.0;
    for i in 0..4 {
        for j in i + 1..4 {
            sum += mad(&imgs[i], &imgs[j]);
        }
    }
    sum / 6.0
}

#[test]
fn chaos_spreads_the_four_images_apart() {
    let prompts = [
        "a red sunset over the ocean",
        "a green forest with tall trees",
        "a cat sitting on a windowsill",
        "portrait of an old fisherman",
    ];
    let mean = |chaos| prompts.iter().map(|p| spread(p, 9, chaos)).sum::<f64>() / 4.0;
    let (calm, some, wild) = (mean(0), mean(50), mean(100));
    assert!(
        calm + 2.0 < some && some + 2.0 < wild,
        "spread at chaos 0, 50, 100: {calm:.1}, {some:.1}, {wild:.1}"
    );
    // Chaos 0 is the picture as it always was.
    let zero = Look::default();
    assert_eq!(
        render_look(prompts[0], 9, 2, 64, 64, &zero),
        render(prompts[0], 9, 2, 64, 64)
    );
}

#[test]
fn every_look_is_deterministic() {
    let look = Look {
        without: "trees".into(),
        chaos: 70,
        tile: true,
        style: Some(9),
        stop: Some(60),
    };
    for v in 0..4 {
        let a = render_look("a forest by a lake at dawn", 4, v, 80, 48, &look);
        assert_eq!(
            a,
            render_look("a forest by a lake at dawn", 4, v, 80, 48, &look)
        );
    }
}

#[test]
fn a_style_code_picks_the_palette_and_shapes_whatever_the_prompt() {
    let styled = |code| Look {
        style: Some(code),
        ..Look::default()
    };
    let a = render_look("a red sunset over the ocean", 3, 0, 64, 64, &styled(11));
    // The same code, the same picture; another code, another.
    assert_eq!(
        a,
        render_look("a red sunset over the ocean", 3, 0, 64, 64, &styled(11))
    );
    assert!(
        mad(
            &a,
            &render_look("a red sunset over the ocean", 3, 0, 64, 64, &styled(12))
        ) > 1.0
    );
    assert!(mad(&a, &render("a red sunset over the ocean", 3, 0, 64, 64)) > 1.0);
}

#[test]
fn stop_draws_less() {
    let stopped = Look {
        stop: Some(20),
        ..Look::default()
    };
    let prompt = "a cat and a dog under the moon with trees and stars";
    let whole = render(prompt, 3, 0, 64, 64);
    let part = render_look(prompt, 3, 0, 64, 64, &stopped);
    assert!(mad(&whole, &part) > 1.0);
    let all = Look {
        stop: Some(100),
        ..Look::default()
    };
    assert_eq!(render_look(prompt, 3, 0, 64, 64, &all), whole);
}
