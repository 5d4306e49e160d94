//! Describe: four prompts that could have made an image, from what its pixels suggest. The
//! image is reduced to at most 64 x 64 and measured: the dominant colours (named from hue,
//! saturation and value), overall brightness, contrast (spread of luminance), edge density
//! (mean luminance step), orientation, and a guessed subject from how the top and bottom
//! thirds differ. Four templates turn these into prompts; known scene words lead each one.

use std::collections::BTreeMap;

use crate::images::RgbaImage;

use super::{luma, resize, usable};

/// Side of the reduced image the measurements use.
const PROBE: u32 = 64;

/// A colour name for straight RGB, e.g. "deep blue", "warm orange", "pale grey".
fn colour_name(r: u8, g: u8, b: u8) -> &'static str {
    let (rf, gf, bf) = (f32::from(r), f32::from(g), f32::from(b));
    let max = rf.max(gf).max(bf);
    let min = rf.min(gf).min(bf);
    let v = max / 255.0;
    let s = if max > 0.0 { (max - min) / max } else { 0.0 };
    if v < 0.13 {
        return "black";
    }
    if s < 0.15 {
        return if v > 0.88 {
            "white"
        } else if v > 0.62 {
            "pale grey"
        } else if v > 0.32 {
            "grey"
        } else {
            "charcoal"
        };
    }
    let d = max - min;
    let hue = if max == rf {
        60.0 * ((gf - bf) / d)
    } else if max == gf {
        60.0 * ((bf - rf) / d + 2.0)
    } else {
        60.0 * ((rf - gf) / d + 4.0)
    };
    let hue = if hue < 0.0 { hue + 360.0 } else { hue };
    let family = match hue {
        h if !(12.0..345.0).contains(&h) => 0, // red
        h if h < 40.0 => 1,                    // orange
        h if h < 68.0 => 2,                    // yellow
        h if h < 160.0 => 3,                   // green
        h if h < 195.0 => 4,                   // teal
        h if h < 255.0 => 5,                   // blue
        h if h < 290.0 => 6,                   // purple
        h if h < 325.0 => 7,                   // magenta
        _ => 8,                                // pink
    };
    // Dark, saturated reds and oranges read as browns.
    if (family == 1 || (family == 2 && v < 0.5)) && v < 0.62 && s > 0.3 {
        return if v < 0.38 { "dark brown" } else { "brown" };
    }
    const NAMES: [[&str; 4]; 9] = [
        // deep, muted, vivid, plain
        ["deep red", "dusty red", "vivid red", "warm red"],
        [
            "burnt orange",
            "muted orange",
            "bright orange",
            "warm orange",
        ],
        ["olive", "pale yellow", "bright yellow", "golden yellow"],
        ["deep green", "sage green", "vivid green", "green"],
        ["deep teal", "muted teal", "bright teal", "teal"],
        ["deep blue", "soft blue", "vivid blue", "cool blue"],
        ["deep purple", "lavender", "vivid purple", "purple"],
        ["deep magenta", "muted magenta", "hot magenta", "magenta"],
        ["deep rose", "pale pink", "hot pink", "pink"],
    ];
    let shade = if v < 0.45 {
        0
    } else if s < 0.4 {
        1
    } else if v > 0.85 && s > 0.75 {
        2
    } else {
        3
    };
    NAMES[family][shade]
}

/// The measurements describe's prompts are built from.
struct Look {
    colours: Vec<&'static str>,
    warm: f32,
    brightness: f32,
    contrast: f32,
    edges: f32,
    subject: &'static str,
}

fn measure(img: &RgbaImage) -> Look {
    let probe = resize(img, img.width.min(PROBE), img.height.min(PROBE));
    let (w, h) = (probe.width as usize, probe.height as usize);
    let mut counts: BTreeMap<&'static str, u32> = BTreeMap::new();
    let mut lum = Vec::with_capacity(w * h);
    let (mut sum, mut warm, mut n) = (0f32, 0f32, 0f32);
    let (mut top, mut bottom) = ([0f32; 4], [0f32; 4]);
    for (i, p) in probe.data.chunks_exact(4).enumerate() {
        let l = luma([p[0], p[1], p[2], p[3]]);
        lum.push(l);
        if p[3] < 64 {
            continue;
        }
        *counts.entry(colour_name(p[0], p[1], p[2])).or_insert(0) += 1;
        sum += l;
        warm += f32::from(p[0]) - f32::from(p[2]);
        n += 1.0;
        let y = i / w;
        let third = if y * 3 < h {
            Some(&mut top)
        } else if y * 3 >= 2 * h {
            Some(&mut bottom)
        } else {
            None
        };
        if let Some(t) = third {
            t[0] += f32::from(p[0]);
            t[1] += f32::from(p[1]);
            t[2] += f32::from(p[2]);
            t[3] += 1.0;
        }
    }
    let n = n.max(1.0);
    let mean = sum / n;
    let var = lum.iter().map(|l| (l - mean) * (l - mean)).sum::<f32>() / lum.len().max(1) as f32;
    let mut steps = 0f32;
    let mut nsteps = 0f32;
    for y in 0..h {
        for x in 0..w {
            let l = lum[y * w + x];
            if x + 1 < w {
                steps += (lum[y * w + x + 1] - l).abs();
                nsteps += 1.0;
            }
            if y + 1 < h {
                steps += (lum[(y + 1) * w + x] - l).abs();
                nsteps += 1.0;
            }
        }
    }
    let mut ranked: Vec<(&'static str, u32)> = counts.into_iter().collect();
    // Most pixels first; the map's order breaks ties, so the ranking is deterministic.
    ranked.sort_by_key(|r| std::cmp::Reverse(r.1));
    let total: u32 = ranked.iter().map(|r| r.1).sum();
    let colours: Vec<&'static str> = ranked
        .iter()
        .enumerate()
        .filter(|(i, r)| *i == 0 || r.1 * 20 >= total)
        .take(3)
        .map(|(_, r)| r.0)
        .collect();
    let avg = |t: [f32; 4]| {
        let c = t[3].max(1.0);
        [t[0] / c, t[1] / c, t[2] / c]
    };
    let (t, b) = (avg(top), avg(bottom));
    let tl = (299.0 * t[0] + 587.0 * t[1] + 114.0 * t[2]) / 1000.0;
    let bl = (299.0 * b[0] + 587.0 * b[1] + 114.0 * b[2]) / 1000.0;
    let edges = steps / nsteps.max(1.0);
    let subject = if top[3] == 0.0 || bottom[3] == 0.0 || h < 3 {
        "abstract composition"
    } else if tl > bl + 12.0 && t[2] > t[0] + 10.0 && b[1] > b[2] && b[1] > b[0] {
        "green landscape under an open sky"
    } else if tl > bl + 12.0 && t[2] > t[0] + 10.0 {
        "wide horizon beneath a clear sky"
    } else if tl > bl + 12.0 && t[0] > t[2] + 25.0 {
        "sunset glowing over the horizon"
    } else if mean < 70.0 && edges > 3.0 {
        "night scene with scattered lights"
    } else if b[2] > b[0] + 20.0 && bl < tl {
        "calm seascape"
    } else if edges > 14.0 {
        "intricate pattern"
    } else if edges < 2.5 {
        "colour field"
    } else {
        "abstract composition"
    };
    Look {
        colours,
        warm: warm / n,
        brightness: mean,
        contrast: var.sqrt(),
        edges,
        subject,
    }
}

/// "a", "a and b", "a, b and c".
fn and_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} and {}", rest.join(", "), last),
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The reduced aspect ratio as Midjourney writes it: " --ar 16:9".
fn ar_suffix(w: u32, h: u32) -> String {
    if w == 0 || h == 0 {
        return " --ar 1:1".to_string();
    }
    let g = gcd(w, h);
    format!(" --ar {}:{}", w / g, h / g)
}

/// Four distinct prompts that could have made `image`, built from its dominant colours,
/// brightness, contrast, edge density, orientation and a guessed subject, each ending with the
/// reduced " --ar W:H" of the image. With `scene_words` (the meaningful words of the prompt
/// that made it), each prompt leads with those words in a different order or selection.
/// Deterministic.
pub fn describe(image: &RgbaImage, scene_words: Option<&[String]>) -> Vec<String> {
    let ar = ar_suffix(image.width, image.height);
    let look = if usable(image) {
        measure(image)
    } else {
        Look {
            colours: vec!["black"],
            warm: 0.0,
            brightness: 0.0,
            contrast: 0.0,
            edges: 0.0,
            subject: "colour field",
        }
    };
    let c = &look.colours;
    let first = c.first().copied().unwrap_or("grey");
    let others: Vec<&str> = c.iter().skip(1).copied().collect();
    let bright = match look.brightness {
        b if b < 60.0 => "dark",
        b if b < 105.0 => "dim, moody",
        b if b < 165.0 => "softly lit",
        b if b < 210.0 => "bright",
        _ => "luminous",
    };
    let contrast = match look.contrast {
        v if v < 20.0 => "soft low contrast",
        v if v < 55.0 => "gentle contrast",
        _ => "dramatic high contrast",
    };
    let edges = match look.edges {
        e if e < 2.5 => "minimal",
        e if e < 7.0 => "clean",
        e if e < 14.0 => "detailed",
        _ => "busy",
    };
    let (w, h) = (image.width.max(1) as f32, image.height.max(1) as f32);
    let orient = if w > h * 1.9 {
        "panoramic"
    } else if w > h * 1.05 {
        "landscape"
    } else if h > w * 1.05 {
        "portrait"
    } else {
        "square"
    };
    let palette = if look.warm > 25.0 {
        "warm"
    } else if look.warm < -25.0 {
        "cool"
    } else {
        "balanced"
    };
    let colours_all = and_list(c);
    let accents = if others.is_empty() {
        format!("{first} tones")
    } else {
        format!("{first} tones with {} accents", and_list(&others))
    };
    let tails = [
        format!("{} in {colours_all}, {bright}, {edges}", look.subject),
        format!("{edges} {orient} composition, {accents}, {contrast}"),
        format!("{bright} {palette} palette of {first}, {contrast}, {edges} shapes"),
        format!(
            "{orient} digital painting of {colours_all}, {} mood",
            bright
        ),
    ];
    let words: Vec<&str> = scene_words
        .unwrap_or(&[])
        .iter()
        .map(|w| w.trim())
        .filter(|w| !w.is_empty())
        .collect();
    let leads: [String; 4] = if words.is_empty() {
        Default::default()
    } else {
        let n = words.len();
        let mut rotated = words[1..].to_vec();
        rotated.push(words[0]);
        [
            words.join(" "),
            rotated.join(" "),
            words.join(", "),
            words[..n.div_ceil(2)].join(" "),
        ]
    };
    let mut out: Vec<String> = Vec::with_capacity(4);
    for (lead, tail) in leads.iter().zip(tails.iter()) {
        let body = if lead.is_empty() {
            tail.clone()
        } else {
            format!("{lead}, {tail}")
        };
        let mut prompt = format!("{body}{ar}");
        // The templates differ, but guard against a collision anyway.
        let mut extra = 0;
        while out.contains(&prompt) {
            extra += 1;
            prompt = format!("{body}, variation {extra}{ar}");
        }
        out.push(prompt);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{scene, solid};
    use super::*;

    fn distinct(p: &[String]) -> bool {
        p.iter()
            .enumerate()
            .all(|(i, a)| p[i + 1..].iter().all(|b| a != b))
    }

    #[test]
    fn flat_colours_are_named() {
        for (rgba, word) in [
            ([255, 0, 0, 255], "red"),
            ([10, 30, 200, 255], "blue"),
            ([250, 140, 20, 255], "orange"),
            ([30, 160, 40, 255], "green"),
            ([0, 0, 0, 255], "black"),
            ([250, 250, 250, 255], "white"),
        ] {
            let p = describe(&solid(32, 32, rgba), None);
            assert_eq!(p.len(), 4);
            assert!(distinct(&p), "{p:?}");
            for s in &p {
                assert!(s.contains(word), "{rgba:?}: {s}");
                assert!(s.ends_with(" --ar 1:1"), "{s}");
            }
        }
    }

    #[test]
    fn aspect_ratio_and_orientation() {
        let p = describe(&scene(1024, 576), None);
        assert!(p.iter().all(|s| s.ends_with(" --ar 16:9")), "{p:?}");
        assert!(p.iter().any(|s| s.contains("landscape")));
        let p = describe(&solid(20, 30, [0, 0, 255, 255]), None);
        assert!(p.iter().all(|s| s.ends_with(" --ar 2:3")), "{p:?}");
        assert!(p.iter().any(|s| s.contains("portrait")));
    }

    #[test]
    fn scene_words_lead() {
        let img = scene(64, 48);
        let words: Vec<String> = ["lighthouse", "rocky", "coast", "sunset"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let p = describe(&img, Some(&words));
        assert_eq!(p.len(), 4);
        assert!(distinct(&p), "{p:?}");
        for s in &p {
            let lead = s.split(',').next().unwrap();
            assert!(words.iter().any(|w| lead.starts_with(w.as_str())), "{s}");
        }
        assert!(p[0].starts_with("lighthouse rocky coast sunset, "));
        assert!(p[1].starts_with("rocky coast sunset lighthouse, "));
        assert_eq!(p, describe(&img, Some(&words)));
    }

    #[test]
    fn sky_over_ground_suggests_a_horizon() {
        let mut img = solid(60, 60, [40, 120, 40, 255]);
        for p in img.data.chunks_exact_mut(4).take(60 * 30) {
            p.copy_from_slice(&[120, 170, 240, 255]);
        }
        let p = describe(&img, None);
        assert!(p.iter().any(|s| s.contains("sky")), "{p:?}");
    }

    #[test]
    fn degenerate_images() {
        let p = describe(&RgbaImage::new(0, 0), None);
        assert_eq!(p.len(), 4);
        assert!(distinct(&p));
        assert!(p[0].ends_with(" --ar 1:1"));
        let p = describe(&solid(1, 1, [1, 2, 3, 0]), Some(&[]));
        assert_eq!(p.len(), 4);
        let p = describe(&scene(300, 2), Some(&["x".to_string()]));
        assert!(p.iter().all(|s| s.starts_with("x")));
    }
}
