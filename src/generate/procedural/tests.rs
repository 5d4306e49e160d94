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
