//! The built-in procedural generator: abstract vector pictures drawn from the
//! prompt's words. Words map to colours, palettes, subjects and moods; unknown
//! words still contribute a hue and a shape family from their hash. Everything
//! is drawn with tiny-skia from a private PRNG and private trigonometry, so the
//! same inputs give the same pixels whatever the crate versions.

use sha2::{Digest, Sha256};
use tiny_skia::{
    Color, FillRule, GradientStop, LinearGradient, Paint, Path, PathBuilder, Pixmap, Point,
    RadialGradient, Rect, Shader, SpreadMode, Transform,
};

use super::raster::RgbaImage;

/// Render variant `variant` (0..4) of the picture for `prompt` with `seed`, at width x height.
/// Deterministic: same (prompt, seed, variant, width, height) => identical pixels on every run/platform.
pub fn render(prompt: &str, seed: u64, variant: u32, width: u32, height: u32) -> RgbaImage {
    let theme = Theme::parse(prompt);
    let base = seed_hash(prompt, seed, None);
    let vseed = seed_hash(prompt, seed, Some(variant));
    let pal = Palette::build(&theme, base, variant);
    let Some(pm) = Pixmap::new(width, height) else {
        return flat(width, height, pal.sky[0]);
    };
    let mut art = Art::new(pm, Rng(vseed), pal, theme.m);
    art.paint(&theme);
    to_straight(&art.pm, width, height)
}

/// A flat image for sizes tiny-skia cannot allocate.
fn flat(width: u32, height: u32, c: Rgb) -> RgbaImage {
    let px = [to_u8(c.r), to_u8(c.g), to_u8(c.b), 255];
    let len = width as usize * height as usize;
    RgbaImage {
        width,
        height,
        data: px.repeat(len),
    }
}

fn to_u8(v: f32) -> u8 {
    (clamp01(v) * 255.0 + 0.5) as u8
}

/// Premultiplied tiny-skia pixels to straight RGBA.
fn to_straight(pm: &Pixmap, width: u32, height: u32) -> RgbaImage {
    let mut data = pm.data().to_vec();
    for px in data.chunks_exact_mut(4) {
        let a = u32::from(px[3]);
        if a == 0 {
            px.copy_from_slice(&[0, 0, 0, 0]);
        } else if a < 255 {
            for c in px.iter_mut().take(3) {
                *c = ((u32::from(*c) * 255 + a / 2) / a).min(255) as u8;
            }
        }
    }
    RgbaImage {
        width,
        height,
        data,
    }
}

fn seed_hash(prompt: &str, seed: u64, variant: Option<u32>) -> u64 {
    let mut h = Sha256::new();
    h.update(b"easel-procedural-v1\0");
    h.update(prompt.as_bytes());
    h.update([0u8]);
    h.update(seed.to_le_bytes());
    if let Some(v) = variant {
        h.update(v.to_le_bytes());
    }
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_le_bytes(b)
}

/// FNV-1a, for per-word hashes.
fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

// ---------------------------------------------------------------------------
// Deterministic randomness and maths (no platform libm).

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / 16_777_216.0
    }
    fn range(&mut self, a: f32, b: f32) -> f32 {
        a + (b - a) * self.f()
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn chance(&mut self, p: f32) -> bool {
        self.f() < p
    }
    fn count(&mut self, lo: f32, hi: f32, k: f32) -> usize {
        (self.range(lo, hi) * k).round().max(0.0) as usize
    }
}

const PI: f32 = std::f32::consts::PI;
const TAU: f32 = std::f32::consts::TAU;
const HALF_PI: f32 = std::f32::consts::FRAC_PI_2;

/// Sine from a fixed polynomial, identical on every platform.
fn sin(x: f32) -> f32 {
    if !x.is_finite() {
        return 0.0;
    }
    let mut r = x - (x / TAU).round() * TAU;
    if r > HALF_PI {
        r = PI - r;
    } else if r < -HALF_PI {
        r = -PI - r;
    }
    let r2 = r * r;
    r * (1.0
        + r2 * (-1.0 / 6.0 + r2 * (1.0 / 120.0 + r2 * (-1.0 / 5040.0 + r2 * (1.0 / 362_880.0)))))
}

fn cos(x: f32) -> f32 {
    sin(x + HALF_PI)
}

fn clamp01(v: f32) -> f32 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(0.0, 1.0)
    }
}

// ---------------------------------------------------------------------------
// Colour.

#[derive(Clone, Copy, Debug, PartialEq)]
struct Rgb {
    r: f32,
    g: f32,
    b: f32,
}

const WHITE: Rgb = Rgb {
    r: 1.0,
    g: 1.0,
    b: 1.0,
};
const BLACK: Rgb = Rgb {
    r: 0.0,
    g: 0.0,
    b: 0.0,
};

impl Rgb {
    fn hex(v: u32) -> Rgb {
        Rgb {
            r: ((v >> 16) & 255) as f32 / 255.0,
            g: ((v >> 8) & 255) as f32 / 255.0,
            b: (v & 255) as f32 / 255.0,
        }
    }
    fn mix(self, o: Rgb, t: f32) -> Rgb {
        Rgb {
            r: self.r + (o.r - self.r) * t,
            g: self.g + (o.g - self.g) * t,
            b: self.b + (o.b - self.b) * t,
        }
    }
    fn lighten(self, t: f32) -> Rgb {
        self.mix(WHITE, t)
    }
    fn darken(self, t: f32) -> Rgb {
        self.mix(BLACK, t)
    }
    fn lum(self) -> f32 {
        0.2126 * self.r + 0.7152 * self.g + 0.0722 * self.b
    }
    /// Scale saturation by `k` around the luminance.
    fn saturate(self, k: f32) -> Rgb {
        let l = self.lum();
        Rgb {
            r: clamp01(l + (self.r - l) * k),
            g: clamp01(l + (self.g - l) * k),
            b: clamp01(l + (self.b - l) * k),
        }
    }
    fn color(self, a: f32) -> Color {
        Color::from_rgba(
            clamp01(self.r),
            clamp01(self.g),
            clamp01(self.b),
            clamp01(a),
        )
        .unwrap_or(Color::BLACK)
    }
    fn hsl(h: f32, s: f32, l: f32) -> Rgb {
        let h = (h - h.floor()) * 6.0;
        let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
        let x = c * (1.0 - ((h - 2.0 * (h / 2.0).floor()) - 1.0).abs());
        let (r, g, b) = match h as u32 {
            0 => (c, x, 0.0),
            1 => (x, c, 0.0),
            2 => (0.0, c, x),
            3 => (0.0, x, c),
            4 => (x, 0.0, c),
            _ => (c, 0.0, x),
        };
        let m = l - c / 2.0;
        Rgb {
            r: clamp01(r + m),
            g: clamp01(g + m),
            b: clamp01(b + m),
        }
    }
    /// Hue in [0, 1).
    fn hue(self) -> f32 {
        let max = self.r.max(self.g).max(self.b);
        let min = self.r.min(self.g).min(self.b);
        let d = max - min;
        if d <= 1e-6 {
            return 0.0;
        }
        let h = if max == self.r {
            (self.g - self.b) / d
        } else if max == self.g {
            (self.b - self.r) / d + 2.0
        } else {
            (self.r - self.g) / d + 4.0
        };
        let h = h / 6.0;
        h - h.floor()
    }
    fn sat(self) -> f32 {
        let max = self.r.max(self.g).max(self.b);
        let min = self.r.min(self.g).min(self.b);
        max - min
    }
    /// Rotate the hue by `dh` turns keeping saturation/lightness roughly.
    fn shift_hue(self, dh: f32) -> Rgb {
        let max = self.r.max(self.g).max(self.b);
        let min = self.r.min(self.g).min(self.b);
        let l = (max + min) / 2.0;
        let d = max - min;
        if d <= 1e-4 {
            return self;
        }
        let s = d / (1.0 - (2.0 * l - 1.0).abs()).max(1e-4);
        Rgb::hsl(self.hue() + dh, clamp01(s), l)
    }
}

// ---------------------------------------------------------------------------
// Vocabulary.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Subj {
    Sun,
    Moon,
    Planet,
    Orb,
    Mountains,
    Hills,
    Dunes,
    City,
    House,
    Trees,
    Pines,
    Palms,
    Flowers,
    Grass,
    Stars,
    Nebula,
    Waves,
    Boat,
    Clouds,
    Rain,
    Snow,
    Leaves,
    Lights,
    Flames,
    Cat,
    Dog,
    Animal,
    Bird,
    Fish,
    Face,
    Window,
    Grid,
    Cubes,
    Triangles,
    Polys,
    Spiral,
    Stripes,
    Dots,
    Bubbles,
    Hearts,
    Blobs,
    Rings,
    Arcs,
}

/// Most subjects drawn in one picture (keeps the cost bounded).
const MAX_SUBJECTS: usize = 6;

/// Shape families an unknown word may contribute.
const FAMILIES: [Subj; 9] = [
    Subj::Blobs,
    Subj::Rings,
    Subj::Triangles,
    Subj::Stripes,
    Subj::Arcs,
    Subj::Polys,
    Subj::Dots,
    Subj::Spiral,
    Subj::Orb,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mood {
    Dark,
    Bright,
    Pastel,
    Neon,
    Mono,
    Muted,
    Minimal,
    Busy,
    Calm,
    Abstract,
    Land,
    Night,
    Tall,
    Warm,
    Cool,
    Snowcap,
    Sunset,
    Retro,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Mods {
    dark: bool,
    bright: bool,
    pastel: bool,
    neon: bool,
    mono: bool,
    muted: bool,
    minimal: bool,
    busy: bool,
    calm: bool,
    abstract_: bool,
    land: bool,
    night: bool,
    tall: bool,
    warm: bool,
    cool: bool,
    snowcap: bool,
    sunset: bool,
    retro: bool,
}

impl Mods {
    fn set(&mut self, m: Mood) {
        let f = match m {
            Mood::Dark => &mut self.dark,
            Mood::Bright => &mut self.bright,
            Mood::Pastel => &mut self.pastel,
            Mood::Neon => &mut self.neon,
            Mood::Mono => &mut self.mono,
            Mood::Muted => &mut self.muted,
            Mood::Minimal => &mut self.minimal,
            Mood::Busy => &mut self.busy,
            Mood::Calm => &mut self.calm,
            Mood::Abstract => &mut self.abstract_,
            Mood::Land => &mut self.land,
            Mood::Night => &mut self.night,
            Mood::Tall => &mut self.tall,
            Mood::Warm => &mut self.warm,
            Mood::Cool => &mut self.cool,
            Mood::Snowcap => &mut self.snowcap,
            Mood::Sunset => &mut self.sunset,
            Mood::Retro => &mut self.retro,
        };
        *f = true;
    }
}

/// One trait a word carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tr {
    /// A named colour (user intent: tints sky and subjects).
    C(u32),
    /// A theme colour for subjects.
    P(u32),
    /// A sky / background colour.
    B(u32),
    S(Subj),
    M(Mood),
    /// The following colour words describe the background ("on black").
    Bg,
}

/// Words with known meaning. `Some(&[])` means a known filler word.
fn lookup(w: &str) -> Option<&'static [Tr]> {
    use Mood::*;
    use Subj::*;
    use Tr::{Bg, B, C, M, P, S};
    let t: &'static [Tr] = match w {
        // Plain colours.
        "red" => &[C(0xd8261e)],
        "crimson" => &[C(0xb3122e)],
        "scarlet" => &[C(0xf2281c)],
        "ruby" => &[C(0x9b111e)],
        "maroon" | "burgundy" => &[C(0x6b1020)],
        "orange" | "tangerine" => &[C(0xf57c00)],
        "amber" => &[C(0xffb300)],
        "gold" | "golden" => &[C(0xd9a520), M(Warm)],
        "yellow" | "lemon" => &[C(0xf9d71c)],
        "green" => &[C(0x2f9e3a)],
        "emerald" | "jade" => &[C(0x10a060)],
        "lime" => &[C(0x9ee03a)],
        "olive" => &[C(0x708238)],
        "mint" => &[C(0x98f0c8)],
        "teal" => &[C(0x00808a)],
        "turquoise" | "aqua" => &[C(0x30d0c8)],
        "cyan" => &[C(0x00e0f0)],
        "blue" => &[C(0x1f5fd6)],
        "navy" => &[C(0x12225e)],
        "azure" => &[C(0x2f8ff0)],
        "cobalt" | "sapphire" => &[C(0x0f4fba)],
        "indigo" => &[C(0x3d2b91)],
        "violet" => &[C(0x8f3fd8)],
        "purple" => &[C(0x7a2aa8)],
        "lavender" | "lilac" => &[C(0xb6a0e6)],
        "plum" => &[C(0x8e4585)],
        "magenta" | "fuchsia" => &[C(0xe020a0)],
        "pink" => &[C(0xf472a8)],
        "salmon" | "coral" => &[C(0xff6f61)],
        "peach" => &[C(0xffb08a)],
        "brown" | "chocolate" => &[C(0x6e4224)],
        "tan" | "beige" => &[C(0xd8c0a0)],
        "sand" | "sandy" => &[C(0xdcc38c)],
        "ochre" => &[C(0xcc7a22)],
        "rust" => &[C(0xb0420e)],
        "copper" | "bronze" => &[C(0xb07038)],
        "silver" => &[C(0xc4cad0)],
        "grey" | "gray" => &[C(0x8a8f96)],
        "white" => &[C(0xf4f4f0)],
        "black" => &[C(0x0c0c10)],
        "ivory" | "cream" | "pearl" => &[C(0xf6ecd4)],
        "charcoal" => &[C(0x2d3136)],
        // Colour modifiers.
        "dark" | "darkness" | "gloomy" | "moody" | "shadow" | "shadows" | "deep" => &[M(Dark)],
        "bright" | "happy" | "cheerful" | "radiant" | "luminous" | "vivid" | "vibrant" | "bold"
        | "saturated" => &[M(Bright)],
        "pastel" | "soft" | "pale" | "light" => &[M(Pastel)],
        "neon" => &[C(0xff2fd0), C(0x00f0ff), M(Neon)],
        "monochrome" | "mono" | "grayscale" | "greyscale" | "noir" => &[M(Mono)],
        "muted" | "dull" | "faded" | "dusty" => &[M(Muted)],
        "warm" | "cozy" | "hot" => &[M(Warm)],
        "cool" | "cold" | "chilly" => &[M(Cool)],
        "mysterious" | "eerie" | "haunted" | "spooky" => &[M(Dark), P(0x5a3a8a)],
        // Palettes.
        "sunset" | "sundown" | "dusk" => &[
            B(0x2a1b4d),
            B(0x8e3b7a),
            B(0xe8606a),
            B(0xff9a4a),
            B(0xffd27a),
            P(0xff7a45),
            P(0xc2406e),
            P(0x5a2a6e),
            S(Sun),
            M(Land),
            M(Sunset),
        ],
        "sunrise" | "dawn" => &[
            B(0x5a7bc0),
            B(0xf4a6b8),
            B(0xffd29a),
            P(0xffb36b),
            P(0xf48fb1),
            S(Sun),
            M(Land),
            M(Sunset),
        ],
        "twilight" => &[
            B(0x151a45),
            B(0x4b3a8a),
            B(0xc06c9a),
            P(0x7a5cc2),
            S(Stars),
            M(Land),
        ],
        "ocean" | "sea" | "seascape" | "marine" => &[
            B(0x7fc8ef),
            B(0xc7ecff),
            P(0x0a5a9c),
            P(0x1aa3b8),
            P(0x0b2f5e),
            S(Waves),
            M(Land),
        ],
        "wave" | "surf" | "tide" => &[P(0x1a8fc0), P(0x27c3c8), P(0x0b3d6b), S(Waves), M(Land)],
        "beach" | "coast" | "shore" | "island" => &[
            B(0x8fd3f5),
            P(0xf0d9a0),
            P(0x2bb0c8),
            S(Waves),
            S(Palms),
            M(Land),
        ],
        "river" | "lake" | "water" | "pond" | "stream" => {
            &[P(0x2a7fbf), P(0x5bc0d8), S(Waves), M(Land)]
        }
        "underwater" | "aquarium" | "reef" => &[
            B(0x0a4a7a),
            B(0x0b2545),
            P(0x1fb5c8),
            P(0xff8a3a),
            S(Bubbles),
            S(Fish),
        ],
        "forest" | "woods" | "woodland" => &[
            B(0xd6ecd2),
            B(0x9ccaa4),
            P(0x1f6b3a),
            P(0x2e8b47),
            P(0x5aa84a),
            P(0x123d22),
            S(Trees),
            M(Land),
        ],
        "jungle" | "rainforest" => &[
            B(0xa8d8a0),
            P(0x0f6b2f),
            P(0x3cae3c),
            P(0x8bd346),
            P(0x0a3d1e),
            S(Palms),
            S(Trees),
            S(Leaves),
            M(Land),
            M(Busy),
        ],
        "tropical" | "paradise" => &[
            B(0x7fdcf0),
            P(0xff9f1c),
            P(0x2ec4b6),
            P(0xffd166),
            S(Palms),
            M(Land),
        ],
        "desert" | "dune" | "sahara" | "canyon" => &[
            B(0xf6d9a4),
            B(0xffe9c4),
            P(0xd9a55b),
            P(0xc0803a),
            P(0xe8c27f),
            P(0xa0602e),
            S(Dunes),
            S(Sun),
            M(Land),
        ],
        "night" | "midnight" | "nighttime" | "evening" => &[
            B(0x05081c),
            B(0x101a45),
            B(0x23306a),
            P(0x2a3a7a),
            S(Stars),
            M(Night),
        ],
        "space" | "cosmos" | "universe" | "cosmic" | "astronaut" => &[
            B(0x02030a),
            B(0x0b0f2e),
            P(0x3a2a8a),
            P(0x7a3ab8),
            S(Stars),
            S(Planet),
            M(Night),
        ],
        "galaxy" | "nebula" | "milky" => &[
            B(0x03020f),
            B(0x120a35),
            P(0x8a2ab8),
            P(0x2a5ad8),
            P(0xe040a0),
            S(Stars),
            S(Nebula),
            M(Night),
        ],
        "fire" | "flame" | "blaze" | "inferno" | "burning" | "campfire" => &[
            B(0x1a0500),
            B(0x5a1000),
            P(0xff3a10),
            P(0xff8a00),
            P(0xffd000),
            S(Flames),
            M(Warm),
        ],
        "lava" | "magma" | "volcano" | "volcanic" => &[
            B(0x1a0a08),
            B(0x4a1208),
            P(0xff4a10),
            P(0xff9a00),
            P(0xffd040),
            S(Mountains),
            S(Flames),
            M(Land),
            M(Warm),
        ],
        "snow" | "snowfall" | "snowflake" | "blizzard" => &[
            B(0xc8daee),
            B(0xf2f7fc),
            P(0xffffff),
            P(0xb8d4ea),
            P(0x7fa6c8),
            S(Snow),
            M(Snowcap),
        ],
        "ice" | "frozen" | "icy" | "frost" | "glacier" | "arctic" => &[
            B(0xd6f0fb),
            B(0xa9dcef),
            P(0xe8f8ff),
            P(0x8fd0ea),
            P(0x4a9cc8),
            S(Polys),
            M(Snowcap),
            M(Cool),
        ],
        "winter" => &[
            B(0xcfdff0),
            B(0xeef5fb),
            P(0xffffff),
            P(0x9ab8d6),
            P(0x4a6a8a),
            S(Snow),
            S(Pines),
            M(Snowcap),
            M(Cool),
            M(Land),
        ],
        "autumn" | "fall" | "harvest" => &[
            B(0xf6c98a),
            B(0xf9e3c0),
            P(0xd9622b),
            P(0xa0451f),
            P(0xe8a23a),
            P(0x6b3a1f),
            S(Trees),
            S(Leaves),
            M(Warm),
            M(Land),
        ],
        "spring" => &[
            B(0xcfeaf7),
            P(0x9bd770),
            P(0xf7a8c8),
            P(0xfff0a0),
            S(Flowers),
            M(Land),
        ],
        "summer" => &[
            B(0x6fc8f5),
            P(0xffd23f),
            P(0x3fae49),
            P(0xff8c42),
            S(Sun),
            M(Land),
            M(Bright),
        ],
        "cyberpunk" | "futuristic" | "scifi" | "blade" => &[
            B(0x0a0420),
            B(0x2a0a4a),
            B(0x5a0a6a),
            P(0xff2fd0),
            P(0x00f0ff),
            P(0x7a2aff),
            S(City),
            S(Lights),
            M(Neon),
            M(Night),
            M(Land),
        ],
        "synthwave" | "retrowave" | "vaporwave" | "outrun" => &[
            B(0x1a0a3a),
            B(0x6a1a7a),
            B(0xff4fa0),
            P(0xff2fd0),
            P(0x00e0ff),
            P(0xffb000),
            S(Sun),
            S(Grid),
            M(Neon),
            M(Retro),
            M(Land),
        ],
        "retro" | "vintage" | "antique" => &[
            P(0xe07a3a),
            P(0x2a8a8a),
            P(0xf0c060),
            P(0xa03a3a),
            M(Muted),
            M(Retro),
        ],
        "rainbow" | "colorful" | "colourful" | "psychedelic" | "prism" => &[
            P(0xe6261f),
            P(0xf7d038),
            P(0x49da9a),
            P(0x34bbe6),
            P(0x4355db),
            P(0xd23be7),
            M(Bright),
        ],
        "storm" | "stormy" | "thunder" | "thunderstorm" | "lightning" => &[
            B(0x2a3038),
            B(0x59626e),
            P(0x6a7380),
            P(0xc8d0e0),
            S(Clouds),
            S(Rain),
            M(Dark),
        ],
        "fog" | "mist" | "misty" | "foggy" | "haze" | "hazy" => {
            &[B(0xc8ccd0), B(0xe4e6e8), M(Muted), M(Calm)]
        }
        "sky" | "skies" | "heaven" => &[B(0x5aa6e8), B(0xcfe8fb)],
        "candy" | "sweet" | "sugar" | "cute" => {
            &[P(0xff8fc8), P(0x8fd8ff), P(0xfff08f), M(Pastel), S(Bubbles)]
        }
        "coffee" | "cafe" => &[P(0x6f4e37), P(0xc8a27a), P(0x3a2418), M(Warm)],
        "garden" | "meadow" | "field" | "prairie" => &[
            B(0xbfe6f7),
            P(0x5fae45),
            P(0x8fd35a),
            P(0xf26b8a),
            S(Grass),
            S(Flowers),
            M(Land),
        ],
        "grass" | "lawn" => &[P(0x4fa040), P(0x8fd35a), S(Grass), M(Land)],
        // Subjects.
        "sun" | "sunny" | "sunshine" | "sunlight" => &[P(0xffc23a), S(Sun)],
        "moon" | "lunar" | "moonlight" | "moonlit" | "moonrise" => &[S(Moon), M(Night)],
        "planet" | "planets" | "saturn" | "jupiter" | "mars" | "earth" | "world" => &[S(Planet)],
        "circle" | "orb" | "sphere" | "ball" | "disc" | "disk" | "round" | "dot" => &[S(Orb)],
        "mountain" | "peak" | "alps" | "range" | "cliff" | "summit" | "rocky" => {
            &[S(Mountains), M(Land)]
        }
        "hill" | "valley" | "countryside" | "rolling" => &[S(Hills), M(Land)],
        "city" | "skyline" | "building" | "skyscraper" | "tower" | "downtown" | "metropolis"
        | "urban" | "street" | "cityscape" => &[S(City), M(Land)],
        "town" | "village" | "house" | "home" | "cottage" | "cabin" | "farm" => {
            &[S(House), M(Land)]
        }
        "tree" | "oak" | "orchard" => &[S(Trees), M(Land)],
        "pine" | "fir" | "spruce" | "christmas" => &[S(Pines), M(Land)],
        "palm" => &[S(Palms), M(Land)],
        "flower" | "bloom" | "blossom" | "tulip" | "daisy" | "petal" | "bouquet" => &[S(Flowers)],
        "rose" => &[C(0xe8557a), S(Flowers)],
        "sunflower" => &[C(0xf9c51c), S(Flowers)],
        "star" | "starry" | "constellation" | "starlight" => &[S(Stars)],
        "cloud" | "cloudy" | "overcast" => &[S(Clouds)],
        "rain" | "rainy" | "raindrop" | "drizzle" | "downpour" => {
            &[B(0x6a7a8c), S(Rain), S(Clouds), M(Muted)]
        }
        "leaf" | "leaves" | "foliage" => &[S(Leaves)],
        "lights" | "lantern" | "lamp" | "glow" | "glowing" | "bokeh" | "festival" | "firefly"
        | "fireflies" | "sparkle" | "sparkles" => &[S(Lights)],
        "cat" | "kitten" | "kitty" | "feline" => &[S(Cat)],
        "dog" | "puppy" | "hound" | "canine" | "fox" | "wolf" => &[S(Dog)],
        "animal" | "creature" | "beast" | "bear" | "horse" | "deer" | "lion" | "rabbit"
        | "bunny" | "pet" => &[S(Animal)],
        "bird" | "gull" | "seagull" | "crow" | "flock" | "eagle" | "owl" => &[S(Bird)],
        "fish" | "koi" | "goldfish" | "shark" | "whale" => &[S(Fish)],
        "face" | "portrait" | "person" | "woman" | "man" | "girl" | "boy" | "head" | "selfie"
        | "people" | "figure" | "human" | "self" | "lady" => &[S(Face)],
        "window" | "windowsill" | "sill" | "indoors" | "room" => &[S(Window)],
        "boat" | "ship" | "sail" | "sailboat" | "yacht" => &[S(Boat), S(Waves), M(Land)],
        "geometric" | "geometry" | "shapes" | "bauhaus" => &[S(Grid), S(Polys)],
        "cube" | "box" | "isometric" | "block" => &[S(Cubes)],
        "grid" | "tile" | "mosaic" | "checker" | "checkerboard" | "square" | "pixel" => &[S(Grid)],
        "triangle" | "pyramid" | "crystal" | "shard" => &[S(Triangles)],
        "hexagon" | "polygon" | "pentagon" | "diamond" | "gem" => &[S(Polys)],
        "spiral" | "swirl" | "vortex" | "whirlpool" | "hypnotic" => &[S(Spiral)],
        "stripe" | "line" | "band" | "striped" => &[S(Stripes)],
        "polka" | "spot" | "confetti" | "particle" | "halftone" | "dotted" => &[S(Dots)],
        "bubble" | "foam" | "soap" => &[S(Bubbles)],
        "heart" | "love" | "romance" | "romantic" | "valentine" => {
            &[P(0xe8365a), P(0xff8fab), S(Hearts)]
        }
        "blob" | "organic" | "fluid" | "liquid" | "flow" | "wavy" | "lava-lamp" => &[S(Blobs)],
        "ring" | "halo" | "concentric" => &[S(Rings)],
        "arc" | "arch" | "curve" => &[S(Arcs)],
        // Mood and composition.
        "minimal" | "minimalist" | "minimalism" | "simple" | "clean" | "sparse" | "empty"
        | "lone" | "single" | "lonely" | "zen" | "solitary" => &[M(Minimal)],
        "chaotic" | "chaos" | "busy" | "crowded" | "dense" | "wild" | "explosion" | "messy"
        | "intricate" | "detailed" | "complex" | "crowd" => &[M(Busy)],
        "calm" | "peaceful" | "serene" | "quiet" | "tranquil" | "still" | "gentle" | "relaxing"
        | "soothing" => &[M(Calm)],
        "abstract" | "surreal" | "dreamy" | "dream" | "trippy" | "cubist" | "modern"
        | "expressionist" | "dreamlike" => &[M(Abstract)],
        "landscape" | "scenery" | "scenic" | "vista" | "horizon" | "panorama" | "nature"
        | "outdoors" => &[M(Land)],
        "tall" | "giant" | "huge" | "towering" | "high" | "big" | "large" | "enormous" => {
            &[M(Tall)]
        }
        "on" | "against" | "background" | "backdrop" | "behind" => &[Bg],
        // Filler words: known, no traits.
        "a" | "an" | "the" | "of" | "in" | "at" | "with" | "and" | "or" | "over" | "under"
        | "above" | "below" | "beneath" | "by" | "to" | "for" | "from" | "into" | "onto" | "is"
        | "are" | "was" | "it" | "its" | "this" | "that" | "these" | "those" | "very" | "some"
        | "my" | "your" | "his" | "her" | "their" | "our" | "near" | "beside" | "across"
        | "through" | "between" | "sitting" | "standing" | "lying" | "sleeping" | "walking"
        | "flying" | "swimming" | "made" | "style" | "art" | "artwork" | "painting" | "picture"
        | "image" | "photo" | "illustration" | "render" | "digital" | "beautiful" | "pretty"
        | "lots" | "many" | "few" | "one" | "two" | "three" | "full" | "as" | "like"
        | "under-the" | "up" | "down" | "out" | "while" | "during" | "around" | "view"
        | "scene" | "small" | "little" | "tiny" => &[],
        _ => return None,
    };
    Some(t)
}

/// Look a word up, also trying simple plural / adjective endings.
fn lookup_word(w: &str) -> Option<&'static [Tr]> {
    if let Some(t) = lookup(w) {
        return Some(t);
    }
    let stems: [(&str, &str); 5] = [("ies", "y"), ("ves", "f"), ("es", ""), ("s", ""), ("y", "")];
    for (suffix, repl) in stems {
        if let Some(stem) = w.strip_suffix(suffix) {
            if stem.len() >= 2 {
                let cand = format!("{stem}{repl}");
                if let Some(t) = lookup(&cand) {
                    return Some(t);
                }
            }
        }
    }
    // "sunny" -> "sun", "foggy" -> "fog": doubled consonant + y.
    if let Some(stem) = w.strip_suffix('y') {
        let b = stem.as_bytes();
        if b.len() >= 3 && b[b.len() - 1] == b[b.len() - 2] {
            return lookup(&stem[..stem.len() - 1]);
        }
    }
    None
}

#[derive(Default)]
struct Theme {
    named: Vec<Rgb>,
    themed: Vec<Rgb>,
    sky: Vec<Rgb>,
    bg: Vec<Rgb>,
    unknown: Vec<(Rgb, Subj)>,
    subjects: Vec<Subj>,
    m: Mods,
}

impl Theme {
    fn parse(prompt: &str) -> Theme {
        let mut t = Theme::default();
        let lower: String = prompt
            .chars()
            .take(4096)
            .flat_map(char::to_lowercase)
            .collect();
        let mut bg_window = 0u32;
        let mut sky_prio = 0u8;
        for word in lower
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .take(256)
        {
            bg_window = bg_window.saturating_sub(1);
            match lookup_word(word) {
                Some(traits) => {
                    // One word's sky wins: a dramatic one (sunset, night,
                    // neon, storm, fire) over a plain one, else the first.
                    let sky: Vec<Rgb> = traits
                        .iter()
                        .filter_map(|tr| match tr {
                            Tr::B(v) => Some(Rgb::hex(*v)),
                            _ => None,
                        })
                        .collect();
                    if !sky.is_empty() {
                        let dramatic = traits.iter().any(|tr| {
                            matches!(
                                tr,
                                Tr::M(Mood::Sunset | Mood::Night | Mood::Neon | Mood::Dark)
                                    | Tr::S(Subj::Flames)
                            )
                        });
                        let prio = if dramatic { 2 } else { 1 };
                        if prio > sky_prio {
                            sky_prio = prio;
                            t.sky = sky;
                        }
                    }
                    for &tr in traits {
                        match tr {
                            Tr::C(v) if bg_window > 0 => push_unique(&mut t.bg, Rgb::hex(v)),
                            Tr::C(v) => push_unique(&mut t.named, Rgb::hex(v)),
                            Tr::P(v) => push_unique(&mut t.themed, Rgb::hex(v)),
                            Tr::B(_) => {}
                            Tr::S(s) => {
                                if !t.subjects.contains(&s) {
                                    t.subjects.push(s);
                                }
                            }
                            Tr::M(m) => t.m.set(m),
                            Tr::Bg => bg_window = 4,
                        }
                    }
                }
                None => {
                    if t.unknown.len() < 6 && word.chars().count() >= 2 {
                        let h = fnv(word);
                        let hue = (h % 3600) as f32 / 3600.0;
                        let sat = 0.45 + ((h >> 12) % 40) as f32 / 100.0;
                        let light = 0.42 + ((h >> 20) % 20) as f32 / 100.0;
                        let fam = FAMILIES[((h >> 32) % FAMILIES.len() as u64) as usize];
                        t.unknown.push((Rgb::hsl(hue, sat, light), fam));
                    }
                }
            }
        }
        t
    }
}

fn push_unique(v: &mut Vec<Rgb>, c: Rgb) {
    if !v.contains(&c) && v.len() < 12 {
        v.push(c);
    }
}

// ---------------------------------------------------------------------------
// Palette: what the theme's colours become for one seed and variant.

struct Palette {
    /// Background stops, top to bottom.
    sky: Vec<Rgb>,
    /// Subject colours, most important first.
    acc: Vec<Rgb>,
    /// Whether the background is dark (stars show, lights glow).
    dark_bg: bool,
}

impl Palette {
    fn build(t: &Theme, base: u64, variant: u32) -> Palette {
        let mut rng = Rng(base ^ 0x5EED);
        let m = t.m;
        let mut acc: Vec<Rgb> = Vec::new();
        acc.extend(t.named.iter().copied());
        acc.extend(t.themed.iter().copied());
        if acc.is_empty() {
            acc.extend(t.unknown.iter().map(|u| u.0));
        } else if let Some(u) = t.unknown.first() {
            acc.push(u.0);
        }
        if acc.is_empty() {
            let h = (base % 1000) as f32 / 1000.0;
            acc.push(Rgb::hsl(h, 0.65, 0.55));
        }
        if acc.len() < 3 {
            // Harmonious companions of the main colour.
            let a = acc[0];
            let spread = if m.mono { 0.0 } else { rng.range(0.05, 0.12) };
            acc.push(a.shift_hue(spread).lighten(0.25));
            acc.push(a.shift_hue(-spread).darken(0.3));
        }
        // Palette emphasis differs by variant: rotate which accent leads
        // (named colours keep the lead on even variants).
        if acc.len() > 1 && variant % 2 == 1 {
            let k = 1 + (variant as usize / 2) % (acc.len() - 1);
            let k = k.min(acc.len() - 1);
            acc.rotate_left(k);
        }

        let mut sky: Vec<Rgb> = if !t.bg.is_empty() {
            let c = t.bg[0];
            if t.bg.len() == 1 {
                vec![c.darken(0.12), c, c.lighten(0.08)]
            } else {
                t.bg.clone()
            }
        } else if !t.sky.is_empty() {
            let mut s = t.sky.clone();
            // Skies darken upwards: order the stops by lightness.
            s.sort_by(|a, b| a.lum().total_cmp(&b.lum()));
            if let Some(&n) = t.named.first() {
                for c in s.iter_mut() {
                    *c = c.mix(n, 0.35);
                }
            }
            s
        } else if m.night {
            vec![Rgb::hex(0x04061a), Rgb::hex(0x0f1840), Rgb::hex(0x26306a)]
        } else {
            let a = acc[0];
            let b = acc.get(1).copied().unwrap_or(a);
            vec![a.darken(0.35), a.mix(b, 0.3), a.lighten(0.35)]
        };
        if sky.len() == 1 {
            let c = sky[0];
            sky = vec![c.darken(0.15), c, c.lighten(0.15)];
        }
        // Slight hue/lightness jitter per seed and variant keeps pictures alive.
        let dh = rng.range(-0.02, 0.02) + (variant as f32 - 1.5) * 0.008;
        let adjust = |c: Rgb, is_sky: bool| -> Rgb {
            let mut c = c.shift_hue(dh);
            if m.mono {
                let l = c.lum();
                let tint = t.named.first().copied().unwrap_or(Rgb::hex(0x808080));
                c = Rgb { r: l, g: l, b: l }.mix(tint, 0.12);
            }
            if m.muted {
                c = c.saturate(0.55);
            }
            if m.pastel {
                c = c.lighten(0.45).saturate(0.85);
            }
            if m.neon && !is_sky {
                c = c.saturate(1.6);
            }
            if m.bright {
                c = c.saturate(1.3).lighten(0.06);
            }
            if m.dark {
                c = c.darken(if is_sky { 0.55 } else { 0.3 });
            }
            if m.warm {
                c = c.mix(Rgb::hex(0xff9a40), 0.1);
            }
            if m.cool {
                c = c.mix(Rgb::hex(0x4a8ad8), 0.1);
            }
            c
        };
        let lead = acc[0];
        let sky: Vec<Rgb> = sky
            .into_iter()
            .map(|c| {
                // Palette emphasis per variant: as is, lighter, leaning on the
                // lead colour, deeper.
                // A background the prompt names ("on black") stays close to it.
                let k = if t.bg.is_empty() { 1.0 } else { 0.3 };
                let c = match variant % 4 {
                    0 => c,
                    1 => c.lighten(0.12 * k),
                    2 => c.mix(lead, 0.22 * k),
                    _ => c.darken(0.18 * k).saturate(1.0 + 0.15 * k),
                };
                adjust(c, true)
            })
            .collect();
        let acc: Vec<Rgb> = acc.into_iter().map(|c| adjust(c, false)).collect();
        let avg = sky.iter().map(|c| c.lum()).sum::<f32>() / sky.len() as f32;
        Palette {
            dark_bg: avg < 0.25,
            sky,
            acc,
        }
    }

    fn acc(&self, i: usize) -> Rgb {
        self.acc[i % self.acc.len()]
    }

    /// Background colour at relative height `t` (0 top, 1 bottom).
    fn sky_at(&self, t: f32) -> Rgb {
        let n = self.sky.len();
        if n == 1 {
            return self.sky[0];
        }
        let x = clamp01(t) * (n - 1) as f32;
        let i = (x.floor() as usize).min(n - 2);
        self.sky[i].mix(self.sky[i + 1], x - i as f32)
    }

    /// The darkest accent.
    fn darkest(&self) -> Rgb {
        let mut best = self.acc[0];
        for &c in &self.acc {
            if c.lum() < best.lum() {
                best = c;
            }
        }
        best
    }

    /// The accent that contrasts most with the background at `t`.
    fn contrast(&self, t: f32) -> Rgb {
        let bg = self.sky_at(t).lum();
        let mut best = self.acc[0];
        for &c in self.acc.iter().take(4) {
            if (c.lum() - bg).abs() > (best.lum() - bg).abs() + 0.15 {
                best = c;
            }
        }
        best
    }
}

// ---------------------------------------------------------------------------
// Path helpers.

fn circle(x: f32, y: f32, r: f32) -> Option<Path> {
    PathBuilder::from_circle(x, y, r.max(0.05))
}

fn oval(x: f32, y: f32, rx: f32, ry: f32) -> Option<Path> {
    Rect::from_xywh(x - rx, y - ry, 2.0 * rx.max(0.05), 2.0 * ry.max(0.05))
        .and_then(PathBuilder::from_oval)
}

fn rect(x: f32, y: f32, w: f32, h: f32) -> Option<Path> {
    Rect::from_xywh(x, y, w.max(0.05), h.max(0.05)).map(PathBuilder::from_rect)
}

fn polygon(pts: &[(f32, f32)]) -> Option<Path> {
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

fn stops(list: &[(f32, Rgb, f32)]) -> Vec<GradientStop> {
    list.iter()
        .map(|&(p, c, a)| GradientStop::new(p, c.color(a)))
        .collect()
}

fn linear(p0: (f32, f32), p1: (f32, f32), list: &[(f32, Rgb, f32)]) -> Option<Shader<'static>> {
    LinearGradient::new(
        Point::from_xy(p0.0, p0.1),
        Point::from_xy(p1.0, p1.1),
        stops(list),
        SpreadMode::Pad,
        Transform::identity(),
    )
}

fn radial(c: (f32, f32), r: f32, list: &[(f32, Rgb, f32)]) -> Option<Shader<'static>> {
    let p = Point::from_xy(c.0, c.1);
    RadialGradient::new(p, p, r, stops(list), SpreadMode::Pad, Transform::identity())
}

/// Rotation by `a` radians then translation to (x, y).
fn place(a: f32, x: f32, y: f32) -> Transform {
    let (s, c) = (sin(a), cos(a));
    Transform::from_row(c, s, -s, c, x, y)
}

// ---------------------------------------------------------------------------
// The painter.

struct Art {
    pm: Pixmap,
    rng: Rng,
    pal: Palette,
    m: Mods,
    w: f32,
    h: f32,
    /// Shorter side.
    s: f32,
    /// Horizon y (landscape) or h.
    horizon: f32,
    /// Element-count multiplier.
    density: f32,
    sun: Option<(f32, f32, f32)>,
}

impl Art {
    fn new(pm: Pixmap, rng: Rng, pal: Palette, m: Mods) -> Art {
        let (w, h) = (pm.width() as f32, pm.height() as f32);
        let density = if m.minimal {
            0.35
        } else if m.busy {
            1.7
        } else if m.calm {
            0.7
        } else {
            1.0
        };
        Art {
            pm,
            rng,
            pal,
            m,
            w,
            h,
            s: w.min(h),
            horizon: h,
            density,
            sun: None,
        }
    }

    fn fill(&mut self, path: Option<Path>, c: Rgb, a: f32) {
        self.fill_t(path, c, a, Transform::identity());
    }

    fn fill_t(&mut self, path: Option<Path>, c: Rgb, a: f32, t: Transform) {
        if let Some(p) = path {
            let mut paint = Paint::default();
            paint.set_color(c.color(a));
            paint.anti_alias = true;
            self.pm.fill_path(&p, &paint, FillRule::Winding, t, None);
        }
    }

    fn fill_shader(&mut self, path: Option<Path>, shader: Option<Shader<'static>>, fb: Rgb) {
        let Some(p) = path else { return };
        let mut paint = Paint::default();
        match shader {
            Some(s) => paint.shader = s,
            None => paint.set_color(fb.color(1.0)),
        }
        paint.anti_alias = true;
        self.pm
            .fill_path(&p, &paint, FillRule::Winding, Transform::identity(), None);
    }

    fn stroke(&mut self, path: Option<Path>, c: Rgb, a: f32, width: f32) {
        if let Some(p) = path {
            let mut paint = Paint::default();
            paint.set_color(c.color(a));
            paint.anti_alias = true;
            let stroke = tiny_skia::Stroke {
                width: width.max(0.1),
                line_cap: tiny_skia::LineCap::Round,
                line_join: tiny_skia::LineJoin::Round,
                ..Default::default()
            };
            self.pm
                .stroke_path(&p, &paint, &stroke, Transform::identity(), None);
        }
    }

    /// A soft radial glow.
    fn glow(&mut self, x: f32, y: f32, r: f32, c: Rgb, a: f32) {
        if r < 0.5 {
            return;
        }
        let sh = radial(
            (x, y),
            r,
            &[(0.0, c, a), (0.35, c, a * 0.45), (1.0, c, 0.0)],
        );
        if sh.is_some() {
            self.fill_shader(circle(x, y, r), sh, c);
        }
    }

    fn paint(&mut self, t: &Theme) {
        // Bounded work: the first few subjects named, then up to two
        // shape families from unknown words.
        let mut subjects: Vec<Subj> = t.subjects.iter().copied().take(MAX_SUBJECTS).collect();
        let primary_count = subjects.len();
        for &(_, fam) in t.unknown.iter().take(2) {
            if !subjects.contains(&fam) {
                subjects.push(fam);
            }
        }
        if subjects.is_empty() {
            subjects.push(FAMILIES[(self.rng.next() % FAMILIES.len() as u64) as usize]);
        }
        // A window needs a view.
        if subjects.contains(&Subj::Window) && primary_count <= 3 {
            let sky_thing = if self.pal.dark_bg {
                Subj::Moon
            } else {
                Subj::Clouds
            };
            for extra in [sky_thing, Subj::Hills] {
                if !subjects.contains(&extra) {
                    subjects.push(extra);
                }
            }
        }
        let land = self.m.land
            || subjects.iter().any(|s| {
                matches!(
                    s,
                    Subj::Mountains | Subj::Hills | Subj::Dunes | Subj::City | Subj::Waves
                )
            });
        if land {
            self.horizon = self.h * self.rng.range(0.55, 0.72);
        }
        self.background(land, &subjects);
        if self.m.calm && !self.m.minimal {
            self.calm_bands();
        }
        // Draw in depth order.
        let order = [
            Subj::Nebula,
            Subj::Stars,
            Subj::Sun,
            Subj::Moon,
            Subj::Planet,
            Subj::Clouds,
            Subj::Bird,
            Subj::Mountains,
            Subj::Hills,
            Subj::Dunes,
            Subj::City,
            Subj::House,
            Subj::Waves,
            Subj::Boat,
            Subj::Trees,
            Subj::Pines,
            Subj::Palms,
            Subj::Grass,
            Subj::Flowers,
            Subj::Stripes,
            Subj::Grid,
            Subj::Cubes,
            Subj::Triangles,
            Subj::Polys,
            Subj::Blobs,
            Subj::Rings,
            Subj::Arcs,
            Subj::Spiral,
            Subj::Dots,
            Subj::Orb,
            Subj::Hearts,
            Subj::Bubbles,
            Subj::Flames,
            Subj::Window,
            Subj::Face,
            Subj::Fish,
            Subj::Cat,
            Subj::Dog,
            Subj::Animal,
            Subj::Rain,
            Subj::Snow,
            Subj::Leaves,
            Subj::Lights,
        ];
        let abstract_heavy = self.m.abstract_ || primary_count == 0;
        for s in order {
            if let Some(idx) = subjects.iter().position(|&x| x == s) {
                // Unknown-word families are accents when real subjects exist.
                let weight = if idx < primary_count || abstract_heavy {
                    1.0
                } else {
                    0.45
                };
                self.subject(s, weight);
            }
        }
        if self.m.abstract_ {
            self.abstract_overlay();
        }
        if self.m.busy {
            let fam = FAMILIES[self.rng.below(FAMILIES.len())];
            self.subject(fam, 0.8);
            self.family(Subj::Triangles, 0.6);
        }
        self.vignette();
    }

    fn background(&mut self, land: bool, subjects: &[Subj]) {
        let (w, h) = (self.w, self.h);
        let n = self.pal.sky.len();
        let list: Vec<(f32, Rgb, f32)> = self
            .pal
            .sky
            .iter()
            .enumerate()
            .map(|(i, &c)| (i as f32 / (n - 1).max(1) as f32, c, 1.0))
            .collect();
        let (p0, p1) = if land {
            ((0.0, 0.0), (0.0, self.horizon))
        } else {
            let dx = self.rng.range(-0.4, 0.4) * w;
            ((w * 0.5 - dx, 0.0), (w * 0.5 + dx, h))
        };
        let first = self.pal.sky[0];
        self.fill_shader(rect(0.0, 0.0, w, h), linear(p0, p1, &list), first);
        if land {
            // Ground below the horizon.
            let ground = self.ground_colour(subjects).mix(self.pal.sky_at(1.0), 0.25);
            let top = ground.mix(self.pal.sky_at(1.0), 0.45);
            let sh = linear(
                (0.0, self.horizon),
                (0.0, h),
                &[(0.0, top, 1.0), (1.0, ground.darken(0.35), 1.0)],
            );
            self.fill_shader(rect(0.0, self.horizon, w, h - self.horizon), sh, ground);
        }
    }

    /// Colour of the land below the horizon.
    fn ground_colour(&self, subjects: &[Subj]) -> Rgb {
        let has = |list: &[Subj]| subjects.iter().any(|s| list.contains(s));
        let find = |lo: f32, hi: f32| {
            self.pal
                .acc
                .iter()
                .copied()
                .filter(|c| c.sat() > 0.12 && (lo..hi).contains(&c.hue()))
                .min_by(|a, b| a.lum().total_cmp(&b.lum()))
        };
        if has(&[Subj::Dunes]) {
            return find(0.04, 0.16).unwrap_or(Rgb::hex(0xc89858));
        }
        if has(&[
            Subj::Grass,
            Subj::Flowers,
            Subj::Trees,
            Subj::Pines,
            Subj::Hills,
            Subj::House,
        ]) {
            let g = find(0.18, 0.48).unwrap_or(Rgb::hex(0x3f7f3a));
            return if self.pal.dark_bg { g.darken(0.6) } else { g };
        }
        self.pal.darkest()
    }

    fn subject(&mut self, s: Subj, weight: f32) {
        match s {
            Subj::Sun => self.sun(),
            Subj::Moon => self.moon(),
            Subj::Planet => self.planet(),
            Subj::Stars => self.stars(),
            Subj::Nebula => self.nebula(),
            Subj::Mountains => self.mountains(),
            Subj::Hills | Subj::Dunes => self.hills(s == Subj::Dunes),
            Subj::City => self.city(),
            Subj::House => self.houses(),
            Subj::Waves => self.waves(),
            Subj::Boat => self.boat(),
            Subj::Trees | Subj::Pines | Subj::Palms => self.trees(s),
            Subj::Grass => self.grass(),
            Subj::Flowers => self.flowers(),
            Subj::Clouds => self.clouds(),
            Subj::Rain => self.rain(),
            Subj::Leaves => self.leaves(),
            Subj::Flames => self.flames(),
            Subj::Cat => self.cat(),
            Subj::Dog | Subj::Animal => self.quadruped(s == Subj::Dog),
            Subj::Bird => self.birds(),
            Subj::Fish => self.fish(),
            Subj::Face => self.face(),
            Subj::Window => self.window(),
            Subj::Lights => self.lights(),
            Subj::Snow => self.snow(),
            Subj::Orb => self.orb(weight),
            Subj::Grid => self.grid(weight),
            Subj::Cubes => self.cubes(weight),
            Subj::Spiral => self.spiral(weight),
            Subj::Stripes => self.stripes(weight),
            Subj::Dots => self.dots(weight),
            Subj::Bubbles => self.bubbles(weight),
            Subj::Hearts => self.hearts(weight),
            Subj::Arcs => self.arcs(weight),
            Subj::Triangles | Subj::Polys | Subj::Rings | Subj::Blobs => self.family(s, weight),
        }
    }

    // -- Sky things ---------------------------------------------------------

    fn sun(&mut self) {
        let r = self.s * self.rng.range(0.08, 0.15) * if self.m.minimal { 1.4 } else { 1.0 };
        let x = self.w * self.rng.range(0.22, 0.78);
        let y = if self.horizon < self.h {
            if self.m.sunset {
                self.horizon - r * self.rng.range(-0.1, 0.6)
            } else {
                self.horizon * self.rng.range(0.25, 0.55)
            }
        } else {
            self.h * self.rng.range(0.25, 0.45)
        };
        // The sun takes the warmest accent, if there is one.
        let warm = self
            .pal
            .acc
            .iter()
            .copied()
            .find(|c| c.sat() > 0.25 && (c.hue() < 0.17 || c.hue() > 0.9))
            .unwrap_or(Rgb::hex(0xffb347));
        let core = Rgb::hex(0xfff1c0).mix(warm, 0.25);
        let halo = Rgb::hex(0xffb347).mix(warm, 0.4);
        self.glow(x, y, r * 4.0, halo, 0.45);
        self.glow(x, y, r * 1.8, core, 0.6);
        let sh = radial(
            (x, y - r * 0.3),
            r * 1.3,
            &[
                (0.0, core.lighten(0.4), 1.0),
                (1.0, core.mix(halo, 0.5), 1.0),
            ],
        );
        self.fill_shader(circle(x, y, r), sh, core);
        if self.m.retro {
            // Retro sun: bands of sky cut through the lower half.
            for k in 0..5 {
                let by = y + r * (0.1 + k as f32 * 0.18);
                let bh = r * (0.03 + k as f32 * 0.02);
                let c = self.pal.sky_at(by / self.horizon.max(1.0));
                let dy = (by - y).abs().max((by + bh - y).abs());
                let half = (r * r - dy * dy).max(0.0).sqrt() + r * 0.02;
                self.fill(rect(x - half, by, 2.0 * half, bh), c, 1.0);
            }
        }
        self.sun = Some((x, y, r));
    }

    fn moon(&mut self) {
        let r = self.s * self.rng.range(0.06, 0.11);
        let x = self.w * self.rng.range(0.15, 0.85);
        let y = self.horizon.min(self.h) * self.rng.range(0.18, 0.4);
        let c = Rgb::hex(0xf4f1e0);
        self.glow(x, y, r * 3.5, Rgb::hex(0xc8d8ff), 0.35);
        self.fill(circle(x, y, r), c, 1.0);
        for _ in 0..5 {
            let a = self.rng.range(0.0, TAU);
            let d = self.rng.range(0.1, 0.6) * r;
            let cr = self.rng.range(0.08, 0.22) * r;
            self.fill(
                circle(x + cos(a) * d, y + sin(a) * d, cr),
                Rgb::hex(0xb8b4a0),
                0.35,
            );
        }
    }

    fn stars(&mut self) {
        let limit = if self.horizon < self.h {
            self.horizon
        } else {
            self.h
        };
        let unit = (self.s / 1024.0).max(0.2);
        if self.pal.dark_bg {
            let n = self.rng.count(120.0, 260.0, self.density);
            let mut pb = PathBuilder::new();
            for _ in 0..n {
                let x = self.rng.range(0.0, self.w);
                let y = self.rng.range(0.0, 1.0);
                let y = y * y * limit;
                pb.push_circle(x, y, unit * self.rng.range(0.6, 2.0));
            }
            self.fill(pb.finish(), Rgb::hex(0xfffbea), 0.85);
        }
        let n = self.rng.count(3.0, 7.0, self.density.max(0.6));
        for _ in 0..n {
            let x = self.rng.range(0.05, 0.95) * self.w;
            let y = self.rng.range(0.05, 0.8) * limit;
            let r = self.s * self.rng.range(0.012, 0.035);
            let c = if self.pal.dark_bg {
                Rgb::hex(0xfff6d0)
            } else {
                self.pal.contrast(y / self.h)
            };
            self.glow(x, y, r * 3.0, c, 0.4);
            self.star_shape(x, y, r, c, 1.0);
        }
    }

    fn star_shape(&mut self, x: f32, y: f32, r: f32, c: Rgb, a: f32) {
        let points = if self.rng.chance(0.5) { 4 } else { 5 };
        let rot = self.rng.range(0.0, TAU);
        let inner = if points == 4 { 0.3 } else { 0.45 };
        let pts: Vec<(f32, f32)> = (0..points * 2)
            .map(|i| {
                let ang = rot + i as f32 * PI / points as f32;
                let rr = if i % 2 == 0 { r } else { r * inner };
                (x + cos(ang) * rr, y + sin(ang) * rr)
            })
            .collect();
        self.fill(polygon(&pts), c, a);
    }

    fn clouds(&mut self) {
        let n = self.rng.count(2.0, 5.0, self.density).max(1);
        let limit = self.horizon.min(self.h);
        for _ in 0..n {
            let cx = self.rng.range(0.0, 1.0) * self.w;
            let cy = self.rng.range(0.12, 0.55) * limit;
            let size = self.s * self.rng.range(0.06, 0.12);
            let tint = Rgb::hex(0xffffff).mix(self.pal.sky_at(cy / self.h), 0.3);
            let k = self.rng.count(5.0, 8.0, 1.0);
            let mut blobs = Vec::with_capacity(k);
            for i in 0..k {
                let t = i as f32 / (k - 1).max(1) as f32 - 0.5;
                let bx = cx + t * size * 4.0;
                let r = size * (1.0 - t.abs()) * self.rng.range(0.7, 1.2) + size * 0.3;
                let by = cy - r * 0.4 + self.rng.range(-0.1, 0.1) * size;
                blobs.push((bx, by, r));
            }
            for (scale, alpha) in [(1.15, 0.12), (1.0, 0.85)] {
                let mut pb = PathBuilder::new();
                for &(bx, by, r) in &blobs {
                    if let Some(rc) = Rect::from_xywh(
                        bx - r * 1.3 * scale,
                        by - r * scale,
                        2.6 * r * scale,
                        2.0 * r * scale,
                    ) {
                        pb.push_oval(rc);
                    }
                }
                self.fill(pb.finish(), tint, alpha);
            }
        }
    }

    // -- Land ---------------------------------------------------------------

    /// A mountain ridge: a few tent-shaped peaks roughened by midpoint
    /// displacement, 97 points across the width. Returns the points and the
    /// indices of the peaks.
    fn ridge(&mut self, base: f32, height: f32) -> (Vec<(f32, f32)>, Vec<usize>) {
        let n = 97;
        let k = 2 + self.rng.below(3);
        let peaks: Vec<(f32, f32, f32)> = (0..k)
            .map(|i| {
                let px = (i as f32 + self.rng.range(0.15, 0.85)) / k as f32;
                (px, self.rng.range(0.55, 1.0), self.rng.range(2.0, 3.4))
            })
            .collect();
        let mut noise = vec![0.0f32; n];
        let mut step = n - 1;
        let mut amp = 0.12;
        while step > 1 {
            let half = step / 2;
            let mut i = half;
            while i < n {
                let mid = (noise[i - half] + noise[(i + half).min(n - 1)]) / 2.0;
                noise[i] = mid + self.rng.range(-0.5, 0.5) * amp;
                i += step;
            }
            amp *= 0.6;
            step = half;
        }
        let pts = (0..n)
            .map(|i| {
                let x = i as f32 / (n - 1) as f32;
                let v = peaks
                    .iter()
                    .map(|&(px, ph, sl)| ph - (x - px).abs() * sl)
                    .fold(0.08, f32::max);
                (x * self.w, base - (v + noise[i]).max(0.0) * height)
            })
            .collect();
        let idx = peaks
            .iter()
            .map(|&(px, _, _)| ((px * (n - 1) as f32).round() as usize).min(n - 1))
            .collect();
        (pts, idx)
    }

    fn mountains(&mut self) {
        let layers = if self.m.minimal {
            2
        } else {
            3 + self.rng.below(2)
        };
        let rock = self.pal.darkest().mix(Rgb::hex(0x3a4050), 0.3);
        let tall = if self.m.tall { 1.3 } else { 1.0 };
        let fog = self.pal.sky_at(1.0);
        let snowy = self.m.snowcap || self.rng.chance(0.3);
        for i in 0..layers {
            let depth = i as f32 / (layers - 1).max(1) as f32; // 0 far .. 1 near
            let base = self.horizon + depth * (self.h - self.horizon) * 0.4;
            let height = self.h * self.rng.range(0.25, 0.4) * tall * (1.0 - depth * 0.4);
            let (pts, peaks) = self.ridge(base, height);
            let top = pts.iter().fold(f32::MAX, |a, p| a.min(p.1));
            let body = rock
                .mix(self.pal.acc(i + 1), 0.2)
                .mix(fog, 0.65 * (1.0 - depth))
                .darken(0.2 * depth);
            let mut pb = PathBuilder::new();
            pb.move_to(0.0, self.h);
            for &(x, y) in &pts {
                pb.line_to(x, y);
            }
            pb.line_to(self.w, self.h);
            pb.close();
            let sh = linear(
                (0.0, top),
                (0.0, base.max(top + 1.0)),
                &[(0.0, body.lighten(0.1), 1.0), (1.0, body.darken(0.2), 1.0)],
            );
            self.fill_shader(pb.finish(), sh, body);
            let snow = Rgb::hex(0xf6f9ff).mix(fog, 0.35 * (1.0 - depth));
            for &p in &peaks {
                // The local summit near the nominal peak.
                let lo = p.saturating_sub(3);
                let hi = (p + 3).min(pts.len() - 1);
                let mut pi = p;
                for j in lo..=hi {
                    if pts[j].1 < pts[pi].1 {
                        pi = j;
                    }
                }
                let peak_y = pts[pi].1;
                if base - peak_y < height * 0.35 {
                    continue;
                }
                // Shadowed right-hand face.
                let mut r = pi;
                while r + 1 < pts.len() && pts[r + 1].1 >= pts[r].1 - 1.0 && pts[r].1 < base {
                    r += 1;
                }
                let mut face: Vec<(f32, f32)> = pts[pi..=r].to_vec();
                let foot_x = pts[pi].0 + (pts[r].0 - pts[pi].0) * 0.25;
                face.push((foot_x, base));
                self.fill(polygon(&face), body.darken(0.5), 0.22);
                if !snowy || depth > 0.7 {
                    continue;
                }
                let line = peak_y + (base - peak_y) * self.rng.range(0.25, 0.38);
                let mut l = pi;
                while l > 0 && pts[l - 1].1 < line {
                    l -= 1;
                }
                let mut r = pi;
                while r + 1 < pts.len() && pts[r + 1].1 < line {
                    r += 1;
                }
                if r <= l {
                    continue;
                }
                let mut cap: Vec<(f32, f32)> = pts[l..=r].to_vec();
                let (x0, x1) = (pts[l].0, pts[r].0);
                let teeth = 7;
                for k in (1..teeth).rev() {
                    let x = x0 + (x1 - x0) * k as f32 / teeth as f32;
                    let dip = if k % 2 == 0 { -0.5 } else { 0.5 };
                    let y = line + (base - peak_y) * 0.1 * (dip + self.rng.range(-0.3, 0.3));
                    cap.push((x, y));
                }
                self.fill(polygon(&cap), snow, 0.95);
            }
        }
    }

    fn hills(&mut self, dunes: bool) {
        let layers = if self.m.minimal { 2 } else { 3 };
        let fog = self.pal.sky_at(1.0);
        for i in 0..layers {
            let depth = i as f32 / (layers - 1).max(1) as f32;
            let base = self.horizon + depth * (self.h - self.horizon) * 0.5;
            let amp = self.h * self.rng.range(0.04, 0.1) * (1.0 - depth * 0.3);
            let wl = self.w * self.rng.range(0.35, 0.8);
            let (p1, p2) = (self.rng.range(0.0, TAU), self.rng.range(0.0, TAU));
            let col = self
                .pal
                .acc(i)
                .mix(fog, 0.5 * (1.0 - depth))
                .darken(0.1 * depth);
            let steps = 64;
            let mut pb = PathBuilder::new();
            let mut crest = PathBuilder::new();
            pb.move_to(0.0, self.h);
            let mut top = f32::MAX;
            for k in 0..=steps {
                let x = k as f32 / steps as f32 * self.w;
                let mut v = sin(x / wl * TAU + p1) + 0.4 * sin(x / wl * 2.3 * TAU + p2);
                if dunes {
                    // Sharper crests.
                    v = 1.4 - (v - 1.4).abs() * 1.2;
                }
                let y = base - amp * (1.0 + v * 0.6);
                top = top.min(y);
                pb.line_to(x, y);
                if k == 0 {
                    crest.move_to(x, y);
                } else {
                    crest.line_to(x, y);
                }
            }
            pb.line_to(self.w, self.h);
            pb.close();
            let sh = linear(
                (0.0, top),
                (0.0, self.h),
                &[(0.0, col.lighten(0.15), 1.0), (1.0, col.darken(0.35), 1.0)],
            );
            self.fill_shader(pb.finish(), sh, col);
            if dunes {
                self.stroke(crest.finish(), col.lighten(0.35), 0.5, self.s * 0.004);
            }
        }
    }

    fn city(&mut self) {
        let neon = self.m.neon || self.pal.dark_bg;
        let tall = if self.m.tall { 1.35 } else { 1.0 };
        let sil = self.pal.darkest().darken(0.5);
        for layer in 0..2 {
            let near = layer == 1;
            let col = if near {
                sil
            } else {
                sil.mix(self.pal.sky_at(0.8), 0.45)
            };
            let mut x = -self.rng.range(0.0, 0.05) * self.w;
            let mut windows = PathBuilder::new();
            let mut neon_edges = PathBuilder::new();
            let mut blocks = PathBuilder::new();
            while x < self.w {
                let bw = self.w * self.rng.range(0.04, 0.1) * if near { 1.2 } else { 0.8 };
                let hmax = if near { 0.42 } else { 0.3 };
                let bh = self.h * self.rng.range(0.08, hmax) * tall;
                let top = self.horizon - bh + if near { self.h * 0.04 } else { 0.0 };
                if let Some(r) = Rect::from_xywh(x, top, bw, self.h - top) {
                    blocks.push_rect(r);
                }
                if self.rng.chance(0.3) {
                    let aw = bw * 0.08;
                    if let Some(r) = Rect::from_xywh(x + bw * 0.45, top - bh * 0.15, aw, bh * 0.15)
                    {
                        blocks.push_rect(r);
                    }
                }
                if near && neon && self.rng.chance(0.5) {
                    neon_edges.move_to(x, top);
                    neon_edges.line_to(x + bw, top);
                }
                // Lit windows.
                let cell = (self.s * 0.018).max(2.0);
                let cols = ((bw / cell) as usize).saturating_sub(1).min(24);
                let rows = ((bh / cell) as usize).saturating_sub(1).min(60);
                let p_lit = if self.pal.dark_bg { 0.35 } else { 0.15 };
                for cy in 0..rows {
                    for cx in 0..cols {
                        if self.rng.chance(p_lit) {
                            let wx = x + cell * (cx as f32 + 0.7);
                            let wy = top + cell * (cy as f32 + 0.8);
                            if let Some(r) = Rect::from_xywh(wx, wy, cell * 0.5, cell * 0.55) {
                                windows.push_rect(r);
                            }
                        }
                    }
                }
                x += bw + self.w * self.rng.range(0.0, 0.015);
            }
            self.fill(blocks.finish(), col, 1.0);
            let wcol = if neon {
                self.pal.acc(layer + 1).lighten(0.3)
            } else {
                Rgb::hex(0xffd98a)
            };
            self.fill(windows.finish(), wcol, if near { 0.9 } else { 0.5 });
            if neon {
                let c = self.pal.acc(0).lighten(0.2);
                let path = neon_edges.finish();
                if let Some(p) = &path {
                    self.stroke(Some(p.clone()), c, 0.25, self.s * 0.012);
                }
                self.stroke(path, c, 0.9, self.s * 0.003);
            }
        }
    }

    fn waves(&mut self) {
        let top = self.horizon;
        let bands = self
            .rng
            .count(5.0, 9.0, if self.m.calm { 0.7 } else { 1.0 })
            .max(3);
        let deep = self.pal.darkest().mix(Rgb::hex(0x08203a), 0.3);
        let light = self.pal.acc(1).mix(self.pal.sky_at(1.0), 0.45);
        let amp_k = if self.m.calm { 0.4 } else { 1.0 };
        let phase0 = self.rng.range(0.0, TAU);
        for i in 0..bands {
            let t = i as f32 / bands as f32;
            let y0 = top + (self.h - top) * t * t.sqrt();
            let amp = self.s * (0.004 + 0.03 * t) * amp_k;
            let wl = self.w * self.rng.range(0.15, 0.35) * (0.4 + t);
            let phase = phase0 + self.rng.range(0.0, TAU);
            let col = light.mix(deep, t.sqrt());
            let steps = 48;
            let mut pb = PathBuilder::new();
            let mut edge = PathBuilder::new();
            pb.move_to(0.0, self.h);
            for k in 0..=steps {
                let x = k as f32 / steps as f32 * self.w;
                let y = y0 + amp * sin(x / wl * TAU + phase);
                pb.line_to(x, y);
                if k == 0 {
                    edge.move_to(x, y);
                } else {
                    edge.line_to(x, y);
                }
            }
            pb.line_to(self.w, self.h);
            pb.close();
            let sh = linear(
                (0.0, y0 - amp),
                (0.0, y0 + (self.h - top) * 0.4),
                &[(0.0, col.lighten(0.08), 1.0), (1.0, col.darken(0.25), 1.0)],
            );
            self.fill_shader(pb.finish(), sh, col);
            if i > 0 {
                self.stroke(edge.finish(), WHITE, 0.18, (self.s * 0.003).max(0.5));
            }
        }
        // Sun glitter on the water.
        if let Some((sx, _, sr)) = self.sun {
            let mut pb = PathBuilder::new();
            let n = 26;
            for i in 0..n {
                let t = i as f32 / n as f32;
                let y = top + (self.h - top) * t + self.s * 0.004;
                let half = sr * (1.2 - t * 0.5) * self.rng.range(0.3, 1.0);
                let jitter = self.rng.range(-0.2, 0.2) * sr;
                if let Some(r) =
                    Rect::from_xywh(sx - half + jitter, y, 2.0 * half, (self.s * 0.004).max(0.5))
                {
                    pb.push_rect(r);
                }
            }
            let c = Rgb::hex(0xffe0a0).mix(self.pal.acc(0), 0.3);
            self.fill(pb.finish(), c, 0.6);
        }
    }

    fn trees(&mut self, kind: Subj) {
        let layers = if self.m.minimal { 1 } else { 3 };
        let tall = if self.m.tall { 1.7 } else { 1.0 };
        let ground = self.horizon.min(self.h * 0.92);
        let fog = self.pal.sky_at(0.9);
        if kind != Subj::Palms && !self.pal.dark_bg && !self.m.minimal && self.rng.chance(0.7) {
            self.light_rays();
        }
        if layers > 1 && kind != Subj::Palms {
            // A distant, misty tree line along the horizon.
            let c = self.pal.acc(0).mix(fog, 0.7);
            let mut pb = PathBuilder::new();
            pb.move_to(0.0, self.h);
            let mut x = 0.0;
            let step = (self.s * 0.018).max(1.0);
            pb.line_to(0.0, ground);
            while x < self.w {
                let th = self.h * self.rng.range(0.03, 0.08);
                pb.line_to(x + step, ground - th);
                x += step * 2.0;
                pb.line_to(x, ground - th * self.rng.range(0.2, 0.5));
            }
            pb.line_to(self.w, self.h);
            pb.close();
            self.fill(pb.finish(), c, 1.0);
        }
        for layer in 0..layers {
            let depth = (layer + 1) as f32 / layers as f32; // far .. near
            let n = self
                .rng
                .count(6.0, 10.0, self.density * (2.2 - depth * 1.4))
                .max(1);
            let base_y = ground + (self.h - ground) * (depth - 1.0 / layers as f32) * 0.8;
            let size = 0.35 + 0.65 * depth;
            for _ in 0..n {
                let x = self.rng.range(-0.05, 1.05) * self.w;
                let th = self.h * self.rng.range(0.2, 0.32) * tall * size;
                let crown = self.pal.acc(self.rng.below(4));
                let night = if self.pal.dark_bg { 0.45 } else { 0.0 };
                let crown = crown
                    .mix(fog, 0.6 * (1.0 - depth))
                    .darken(0.15 * depth + night);
                let trunk = Rgb::hex(0x4a3020)
                    .mix(crown, 0.3)
                    .mix(fog, 0.55 * (1.0 - depth));
                let y = base_y + self.rng.range(0.0, 0.04) * self.h * depth;
                if kind == Subj::Palms {
                    self.palm(x, y, th, crown, trunk);
                    continue;
                }
                let conical = match kind {
                    Subj::Pines => true,
                    _ => self.rng.chance(0.35),
                };
                let tw = th * if self.m.tall { 0.035 } else { 0.05 };
                self.fill(rect(x - tw / 2.0, y - th * 0.6, tw, th * 0.6), trunk, 1.0);
                if conical {
                    let tiers = 3;
                    for k in 0..tiers {
                        let f = k as f32 / tiers as f32;
                        let wdt = th * (0.2 - f * 0.05);
                        let yb = y - th * (0.2 + f * 0.25);
                        let yt = yb - th * 0.45;
                        self.fill(
                            polygon(&[(x - wdt, yb), (x + wdt, yb), (x, yt)]),
                            crown.lighten(f * 0.08),
                            1.0,
                        );
                    }
                } else {
                    let cr = th * 0.22;
                    let cy = y - th * 0.75;
                    let mut pb = PathBuilder::new();
                    for _ in 0..6 {
                        let ox = self.rng.range(-0.6, 0.6) * cr;
                        let oy = self.rng.range(-0.9, 0.5) * cr;
                        pb.push_circle(x + ox, cy + oy, cr * self.rng.range(0.5, 0.8));
                    }
                    self.fill(pb.finish(), crown, 1.0);
                    self.fill(
                        circle(x - cr * 0.25, cy - cr * 0.45, cr * 0.4),
                        crown.lighten(0.18),
                        0.45,
                    );
                }
            }
            // Mist between layers.
            if layer + 1 < layers {
                let top = base_y - self.h * 0.12;
                let sh = linear(
                    (0.0, top),
                    (0.0, base_y + self.h * 0.05),
                    &[(0.0, fog, 0.0), (1.0, fog, 0.35)],
                );
                self.fill_shader(rect(0.0, top, self.w, self.h - top), sh, fog);
            }
        }
    }

    /// Soft diagonal light beams.
    fn light_rays(&mut self) {
        let n = self.rng.count(3.0, 6.0, 1.0);
        let sx = self.w * self.rng.range(0.1, 0.9);
        let c = Rgb::hex(0xfffbe0);
        for _ in 0..n {
            let x0 = sx + self.rng.range(-0.1, 0.1) * self.w;
            let spread = self.w * self.rng.range(0.04, 0.1);
            let dx = self.w * self.rng.range(-0.3, 0.3);
            let pts = [
                (x0 - spread * 0.2, 0.0),
                (x0 + spread * 0.2, 0.0),
                (x0 + dx + spread, self.h),
                (x0 + dx - spread, self.h),
            ];
            let sh = linear((0.0, 0.0), (0.0, self.h), &[(0.0, c, 0.22), (1.0, c, 0.0)]);
            self.fill_shader(polygon(&pts), sh, c);
        }
    }

    fn palm(&mut self, x: f32, y: f32, th: f32, crown: Rgb, trunk: Rgb) {
        let lean = self.rng.range(-0.25, 0.25) * th;
        let mut pb = PathBuilder::new();
        pb.move_to(x, y);
        pb.quad_to(x + lean * 0.2, y - th * 0.5, x + lean, y - th);
        self.stroke(pb.finish(), trunk, 1.0, th * 0.05);
        let (tx, ty) = (x + lean, y - th);
        for k in 0..7 {
            let a = -PI + k as f32 * PI / 6.0 + self.rng.range(-0.2, 0.2);
            let len = th * self.rng.range(0.35, 0.5);
            let mut pb = PathBuilder::new();
            pb.move_to(tx, ty);
            pb.quad_to(
                tx + cos(a) * len * 0.6,
                ty + sin(a) * len * 0.6 - len * 0.25,
                tx + cos(a) * len,
                ty + sin(a) * len + len * 0.2,
            );
            self.stroke(pb.finish(), crown, 1.0, th * 0.04);
        }
    }

    // -- Creatures and frames -----------------------------------------------

    fn window(&mut self) {
        let (w, h) = (self.w, self.h);
        let wall = self
            .pal
            .acc(2)
            .mix(Rgb::hex(0x6a5040), 0.5)
            .darken(if self.pal.dark_bg { 0.6 } else { 0.35 });
        let mx = w * self.rng.range(0.1, 0.18);
        let top = h * self.rng.range(0.06, 0.12);
        let bottom = h * self.rng.range(0.7, 0.78);
        let mut pb = PathBuilder::new();
        pb.push_rect(
            Rect::from_xywh(0.0, 0.0, w, h)
                .unwrap_or(Rect::from_xywh(0.0, 0.0, 1.0, 1.0).expect("unit rect")),
        );
        if let Some(r) = Rect::from_xywh(mx, top, w - 2.0 * mx, bottom - top) {
            pb.push_rect(r);
        }
        if let Some(p) = pb.finish() {
            let mut paint = Paint::default();
            paint.set_color(wall.color(1.0));
            paint.anti_alias = true;
            self.pm
                .fill_path(&p, &paint, FillRule::EvenOdd, Transform::identity(), None);
        }
        let frame = wall.lighten(0.25);
        let fw = self.s * 0.02;
        let mut pb = PathBuilder::new();
        if let Some(r) = Rect::from_xywh(mx, top, w - 2.0 * mx, bottom - top) {
            pb.push_rect(r);
        }
        pb.move_to(w / 2.0, top);
        pb.line_to(w / 2.0, bottom);
        pb.move_to(mx, (top + bottom) / 2.0);
        pb.line_to(w - mx, (top + bottom) / 2.0);
        self.stroke(pb.finish(), frame, 1.0, fw);
        // The sill.
        self.fill(
            rect(mx * 0.6, bottom, w - 1.2 * mx, self.s * 0.035),
            frame.lighten(0.15),
            1.0,
        );
        self.fill(
            rect(
                mx * 0.6,
                bottom + self.s * 0.035,
                w - 1.2 * mx,
                self.s * 0.012,
            ),
            wall.darken(0.4),
            1.0,
        );
        self.horizon = bottom;
    }

    fn cat(&mut self) {
        let u = self.s * self.rng.range(0.2, 0.28) * if self.m.minimal { 1.0 } else { 0.9 };
        let x = self.w * self.rng.range(0.3, 0.7);
        let base = if self.horizon < self.h {
            self.horizon
        } else {
            self.h * 0.88
        };
        let c = if self.pal.dark_bg {
            Rgb::hex(0x050508)
        } else {
            self.pal.darkest().darken(0.6)
        };
        let flip = if self.rng.chance(0.5) { 1.0 } else { -1.0 };
        // Tail.
        let mut pb = PathBuilder::new();
        pb.move_to(x + flip * u * 0.45, base - u * 0.08);
        pb.cubic_to(
            x + flip * u * 1.1,
            base,
            x + flip * u * 1.0,
            base - u * 0.7,
            x + flip * u * 0.8,
            base - u * 0.85,
        );
        self.stroke(pb.finish(), c, 1.0, u * 0.12);
        // Body: a pear shape.
        let mut pb = PathBuilder::new();
        pb.move_to(x - u * 0.55, base);
        pb.cubic_to(
            x - u * 0.6,
            base - u * 0.7,
            x - u * 0.3,
            base - u * 1.05,
            x,
            base - u * 1.1,
        );
        pb.cubic_to(
            x + u * 0.3,
            base - u * 1.05,
            x + u * 0.6,
            base - u * 0.7,
            x + u * 0.55,
            base,
        );
        pb.close();
        self.fill(pb.finish(), c, 1.0);
        // Head and ears.
        let hy = base - u * 1.25;
        let hr = u * 0.33;
        self.fill(oval(x, hy, hr * 1.1, hr), c, 1.0);
        for side in [-1.0, 1.0] {
            self.fill(
                polygon(&[
                    (x + side * hr * 0.95, hy - hr * 0.2),
                    (x + side * hr * 0.85, hy - hr * 1.45),
                    (x + side * hr * 0.2, hy - hr * 0.8),
                ]),
                c,
                1.0,
            );
        }
        if self.pal.dark_bg || self.rng.chance(0.5) {
            let eye = Rgb::hex(0xf0e04a).mix(self.pal.acc(1), 0.2);
            for side in [-1.0, 1.0] {
                self.fill(
                    oval(x + side * hr * 0.4, hy + hr * 0.05, hr * 0.16, hr * 0.1),
                    eye,
                    0.95,
                );
            }
        }
    }

    fn orb(&mut self, weight: f32) {
        let minimal = self.m.minimal;
        let n = if minimal {
            1
        } else {
            self.rng.count(1.0, 4.0, self.density * weight).max(1)
        };
        for i in 0..n {
            let r = self.s
                * if minimal {
                    self.rng.range(0.14, 0.24)
                } else {
                    self.rng.range(0.05, 0.18) * weight.max(0.5)
                };
            let (x, y) = if minimal || i == 0 {
                (
                    self.w * self.rng.range(0.35, 0.65),
                    self.h * self.rng.range(0.35, 0.6),
                )
            } else {
                (
                    self.w * self.rng.range(0.1, 0.9),
                    self.h * self.rng.range(0.1, 0.9),
                )
            };
            let c = self.pal.contrast(y / self.h);
            self.glow(x, y, r * 2.2, c, 0.35);
            let sh = radial(
                (x - r * 0.3, y - r * 0.3),
                r * 1.5,
                &[(0.0, c.lighten(0.25), 1.0), (1.0, c.darken(0.12), 1.0)],
            );
            self.fill_shader(circle(x, y, r), sh, c);
        }
    }

    fn lights(&mut self) {
        let n = self.rng.count(12.0, 30.0, self.density);
        for _ in 0..n {
            let x = self.rng.range(0.0, self.w);
            let y = self.rng.range(0.0, self.h);
            let r = self.s * self.rng.range(0.005, 0.03);
            let c = if self.pal.dark_bg {
                self.pal.acc(self.rng.below(3)).lighten(0.3)
            } else {
                Rgb::hex(0xfff0c0)
            };
            self.glow(x, y, r * 3.0, c, 0.35);
            self.fill(circle(x, y, r * 0.5), c.lighten(0.5), 0.8);
        }
    }

    fn snow(&mut self) {
        let unit = (self.s / 1024.0).max(0.2);
        for (count, rmin, rmax, a) in [(220.0, 1.0, 2.5, 0.7), (60.0, 2.5, 5.0, 0.85)] {
            let n = self.rng.count(count * 0.7, count, self.density);
            let mut pb = PathBuilder::new();
            for _ in 0..n {
                let x = self.rng.range(0.0, self.w);
                let y = self.rng.range(0.0, self.h);
                pb.push_circle(x, y, unit * self.rng.range(rmin, rmax));
            }
            self.fill(pb.finish(), WHITE, a);
        }
    }

    fn planet(&mut self) {
        let r = self.s * self.rng.range(0.09, 0.18);
        let x = self.w * self.rng.range(0.2, 0.8);
        let y = self.horizon.min(self.h) * self.rng.range(0.25, 0.5);
        let c = self.pal.acc(self.rng.below(3)).lighten(0.1);
        let tilt = self.rng.range(-0.5, 0.5);
        let t = place(tilt, x, y);
        let ring_c = c.mix(Rgb::hex(0xf0e0c0), 0.5);
        let ring = |from: f32, to: f32| {
            let mut pb = PathBuilder::new();
            for k in 0..=24 {
                let a = from + (to - from) * k as f32 / 24.0;
                let (px, py) = (cos(a) * r * 1.9, sin(a) * r * 0.42);
                if k == 0 {
                    pb.move_to(px, py);
                } else {
                    pb.line_to(px, py);
                }
            }
            pb.finish().and_then(|p| p.transform(t))
        };
        let has_ring = self.rng.chance(0.7);
        self.glow(x, y, r * 2.2, c, 0.3);
        if has_ring {
            self.stroke(ring(PI, TAU), ring_c, 0.8, r * 0.12);
        }
        let sh = radial(
            (x - r * 0.4, y - r * 0.4),
            r * 1.7,
            &[
                (0.0, c.lighten(0.35), 1.0),
                (0.6, c, 1.0),
                (1.0, c.darken(0.65), 1.0),
            ],
        );
        self.fill_shader(circle(x, y, r), sh, c);
        // Cloud bands.
        let mut pb = PathBuilder::new();
        for k in 0..3 {
            let by = y - r * 0.5 + k as f32 * r * 0.4 + self.rng.range(-0.1, 0.1) * r;
            let half = (r * r - (by - y) * (by - y)).max(0.0).sqrt() * 0.95;
            if let Some(rc) = Rect::from_xywh(x - half, by, 2.0 * half, r * 0.1) {
                pb.push_rect(rc);
            }
        }
        self.fill(pb.finish(), c.darken(0.25), 0.35);
        if has_ring {
            self.stroke(ring(0.0, PI), ring_c, 0.9, r * 0.12);
        }
    }

    fn nebula(&mut self) {
        let n = self.rng.count(3.0, 5.0, self.density.clamp(0.6, 1.2));
        for _ in 0..n {
            let x = self.rng.range(0.0, self.w);
            let y = self.rng.range(0.0, self.h);
            let r = self.s * self.rng.range(0.18, 0.38);
            let c = self.pal.acc(self.rng.below(self.pal.acc.len()));
            let a = self.rng.range(0.25, 0.45);
            self.glow(x, y, r, c, a);
        }
        // A spiral arm of dust.
        let (cx, cy) = (
            self.w * self.rng.range(0.35, 0.65),
            self.h * self.rng.range(0.35, 0.65),
        );
        let rot = self.rng.range(0.0, TAU);
        let mut pb = PathBuilder::new();
        let unit = (self.s / 1024.0).max(0.2);
        for arm in 0..2 {
            for k in 0..120 {
                let t = k as f32 / 120.0;
                let a = rot + arm as f32 * PI + t * 4.0;
                let d = t * self.s * 0.45 + self.rng.range(-0.03, 0.03) * self.s;
                let (px, py) = (cx + cos(a) * d, cy + sin(a) * d * 0.6);
                pb.push_circle(px, py, unit * self.rng.range(0.8, 2.2));
            }
        }
        self.fill(pb.finish(), Rgb::hex(0xf8f0ff), 0.6);
        self.glow(cx, cy, self.s * 0.12, Rgb::hex(0xfff0e0), 0.6);
    }

    fn houses(&mut self) {
        let n = if self.m.minimal {
            1
        } else {
            1 + self.rng.below(4)
        };
        let base = if self.horizon < self.h {
            self.horizon + (self.h - self.horizon) * 0.3
        } else {
            self.h * 0.85
        };
        for _ in 0..n {
            let bw = self.s * self.rng.range(0.12, 0.22);
            let bh = bw * self.rng.range(0.6, 0.9);
            let x = self.w * self.rng.range(0.1, 0.9) - bw / 2.0;
            let y = base + self.rng.range(-0.03, 0.05) * self.h;
            let wall = self.pal.acc(self.rng.below(3)).mix(Rgb::hex(0xe8dcc8), 0.4);
            let wall = if self.pal.dark_bg {
                wall.darken(0.6)
            } else {
                wall
            };
            let roof = self.pal.darkest().mix(Rgb::hex(0x7a2a20), 0.4);
            self.fill(rect(x, y - bh, bw, bh), wall, 1.0);
            self.fill(
                polygon(&[
                    (x - bw * 0.1, y - bh),
                    (x + bw * 0.5, y - bh - bw * 0.45),
                    (x + bw * 1.1, y - bh),
                ]),
                roof,
                1.0,
            );
            let lit = if self.pal.dark_bg {
                Rgb::hex(0xffd070)
            } else {
                Rgb::hex(0x6a8aa8)
            };
            self.fill(
                rect(x + bw * 0.4, y - bh * 0.55, bw * 0.2, bh * 0.55),
                roof.darken(0.3),
                1.0,
            );
            for wx in [0.12, 0.7] {
                self.fill(
                    rect(x + bw * wx, y - bh * 0.75, bw * 0.18, bh * 0.22),
                    lit,
                    1.0,
                );
            }
            if self.pal.dark_bg {
                self.glow(x + bw * 0.5, y - bh * 0.6, bw * 0.8, lit, 0.2);
            }
        }
    }

    fn boat(&mut self) {
        let y = self.horizon + (self.h - self.horizon) * self.rng.range(0.15, 0.4);
        let x = self.w * self.rng.range(0.2, 0.8);
        let u = self.s * self.rng.range(0.06, 0.1);
        let dark = self.pal.darkest().darken(0.5);
        self.fill(
            polygon(&[
                (x - u * 1.2, y - u * 0.3),
                (x + u * 1.2, y - u * 0.3),
                (x + u * 0.8, y),
                (x - u * 0.8, y),
            ]),
            dark,
            1.0,
        );
        self.fill(
            rect(x - u * 0.03, y - u * 2.2, u * 0.06, u * 1.9),
            dark,
            1.0,
        );
        let sail = Rgb::hex(0xf8f4ea).mix(self.pal.acc(0), 0.15);
        self.fill(
            polygon(&[
                (x + u * 0.08, y - u * 2.1),
                (x + u * 0.08, y - u * 0.45),
                (x + u * 1.0, y - u * 0.45),
            ]),
            sail,
            1.0,
        );
        self.fill(
            polygon(&[
                (x - u * 0.08, y - u * 1.8),
                (x - u * 0.08, y - u * 0.45),
                (x - u * 0.7, y - u * 0.45),
            ]),
            sail.darken(0.12),
            1.0,
        );
    }

    fn grass(&mut self) {
        let base = self.h;
        let top = if self.horizon < self.h {
            self.horizon
        } else {
            self.h * 0.75
        };
        let g = self.pal.acc(0).mix(Rgb::hex(0x3f8f3a), 0.5);
        for (shade, alpha) in [(0.3, 1.0), (0.0, 0.9), (-0.15, 0.9)] {
            let n = self.rng.count(80.0, 140.0, self.density);
            let mut pb = PathBuilder::new();
            for _ in 0..n {
                let x = self.rng.range(0.0, self.w);
                let y = base + self.s * 0.01;
                let len = (base - top) * self.rng.range(0.15, 0.5);
                let bend = self.rng.range(-0.4, 0.4) * len;
                pb.move_to(x, y);
                pb.quad_to(x, y - len * 0.6, x + bend, y - len);
            }
            let c = if shade > 0.0 {
                g.darken(shade)
            } else {
                g.lighten(-shade)
            };
            self.stroke(pb.finish(), c, alpha, (self.s * 0.004).max(0.5));
        }
    }

    fn flower_colour(&mut self) -> Rgb {
        for _ in 0..4 {
            let c = self.pal.acc(self.rng.below(self.pal.acc.len()));
            let h = c.hue();
            if !(0.18..0.48).contains(&h) && c.sat() > 0.2 {
                return c;
            }
        }
        [
            Rgb::hex(0xf06292),
            Rgb::hex(0xffd54f),
            Rgb::hex(0xba68c8),
            Rgb::hex(0xff8a65),
        ][self.rng.below(4)]
    }

    fn flowers(&mut self) {
        let land = self.horizon < self.h;
        let n = if land {
            self.rng.count(6.0, 14.0, self.density)
        } else {
            self.rng.count(2.0, 5.0, self.density)
        }
        .max(1);
        let stem = self.pal.acc(0).mix(Rgb::hex(0x3f8f3a), 0.7).darken(0.2);
        for i in 0..n {
            let (x, y, r) = if land {
                let t = self.rng.f();
                let y = self.horizon + (self.h - self.horizon) * (0.2 + 0.75 * t);
                (self.rng.range(0.0, self.w), y, self.s * (0.015 + 0.05 * t))
            } else if i == 0 {
                (
                    self.w * self.rng.range(0.35, 0.65),
                    self.h * self.rng.range(0.3, 0.45),
                    self.s * self.rng.range(0.12, 0.18),
                )
            } else {
                (
                    self.rng.range(0.05, 0.95) * self.w,
                    self.rng.range(0.2, 0.8) * self.h,
                    self.s * self.rng.range(0.04, 0.09),
                )
            };
            let mut pb = PathBuilder::new();
            pb.move_to(x, y);
            pb.quad_to(
                x + self.rng.range(-1.0, 1.0) * r,
                (y + self.h) / 2.0,
                x,
                self.h + 2.0,
            );
            self.stroke(pb.finish(), stem, 1.0, (r * 0.12).max(0.6));
            let petal = self.flower_colour();
            let k = 5 + self.rng.below(4);
            let rot = self.rng.range(0.0, TAU);
            for j in 0..k {
                let a = rot + j as f32 * TAU / k as f32;
                self.fill_t(
                    oval(r * 0.55, 0.0, r * 0.55, r * 0.28),
                    petal.lighten(0.1 * (j % 2) as f32),
                    0.92,
                    place(a, x, y),
                );
            }
            self.fill(
                circle(x, y, r * 0.28),
                Rgb::hex(0xffc83a).mix(petal, 0.2).darken(0.1),
                1.0,
            );
        }
    }

    fn rain(&mut self) {
        let n = self.rng.count(150.0, 280.0, self.density.max(0.5));
        let slant = self.rng.range(-0.25, 0.25);
        let mut pb = PathBuilder::new();
        for _ in 0..n {
            let x = self.rng.range(-0.1, 1.1) * self.w;
            let y = self.rng.range(0.0, 1.0) * self.h;
            let len = self.s * self.rng.range(0.02, 0.06);
            pb.move_to(x, y);
            pb.line_to(x + slant * len, y + len);
        }
        let c = Rgb::hex(0xd8e6f5);
        self.stroke(pb.finish(), c, 0.45, (self.s * 0.0025).max(0.5));
    }

    fn leaves(&mut self) {
        let n = self.rng.count(12.0, 30.0, self.density);
        for _ in 0..n {
            let x = self.rng.range(0.0, self.w);
            let y = self.rng.range(0.0, self.h);
            let r = self.s * self.rng.range(0.012, 0.028);
            let c = self.pal.acc(self.rng.below(self.pal.acc.len()));
            let a = self.rng.range(0.0, TAU);
            self.fill_t(oval(0.0, 0.0, r, r * 0.45), c, 0.9, place(a, x, y));
        }
    }

    fn flames(&mut self) {
        let base = if self.horizon < self.h {
            self.horizon + (self.h - self.horizon) * 0.6
        } else {
            self.h * 0.95
        };
        let cx = self.w * self.rng.range(0.35, 0.65);
        let width = self.s * self.rng.range(0.25, 0.45);
        let hot = Rgb::hex(0xfff2a0);
        let mid = Rgb::hex(0xff8a10).mix(self.pal.acc(1), 0.2);
        let outer = Rgb::hex(0xe02810).mix(self.pal.acc(0), 0.2);
        self.glow(cx, base - width * 0.4, width * 1.6, mid, 0.45);
        for (layer, c, scale) in [(0, outer, 1.0), (1, mid, 0.72), (2, hot, 0.45)] {
            let n = 3 + self.rng.below(3);
            for _ in 0..n {
                let fx = cx + self.rng.range(-0.5, 0.5) * width * scale;
                let fw = width * scale * self.rng.range(0.25, 0.45);
                let fh = width * scale * self.rng.range(1.2, 2.2);
                let sway = self.rng.range(-0.4, 0.4) * fw;
                let mut pb = PathBuilder::new();
                pb.move_to(fx - fw, base);
                pb.cubic_to(
                    fx - fw * 1.1,
                    base - fh * 0.5,
                    fx + sway - fw * 0.2,
                    base - fh * 0.7,
                    fx + sway,
                    base - fh,
                );
                pb.cubic_to(
                    fx + sway + fw * 0.3,
                    base - fh * 0.6,
                    fx + fw * 1.1,
                    base - fh * 0.45,
                    fx + fw,
                    base,
                );
                pb.close();
                let sh = linear(
                    (0.0, base),
                    (0.0, base - fh),
                    &[(0.0, c.lighten(0.2), 0.95), (0.7, c, 0.85), (1.0, c, 0.2)],
                );
                self.fill_shader(pb.finish(), sh, c);
            }
            let _ = layer;
        }
        // Embers.
        let mut pb = PathBuilder::new();
        for _ in 0..self.rng.count(20.0, 50.0, self.density) {
            let x = cx + self.rng.range(-1.0, 1.0) * width;
            let y = base - self.rng.range(0.2, 3.0) * width;
            pb.push_circle(x, y, self.s * self.rng.range(0.002, 0.005));
        }
        self.fill(pb.finish(), hot, 0.8);
    }

    /// Silhouette colour for creatures.
    fn silhouette(&self) -> Rgb {
        if self.pal.dark_bg {
            Rgb::hex(0x050508)
        } else {
            self.pal.darkest().darken(0.6)
        }
    }

    fn quadruped(&mut self, dog: bool) {
        let u = self.s * self.rng.range(0.13, 0.2);
        let x = self.w * self.rng.range(0.3, 0.7);
        let base = if self.horizon < self.h {
            self.horizon + (self.h - self.horizon) * 0.5
        } else {
            self.h * 0.85
        };
        let c = self.silhouette();
        let dir = if self.rng.chance(0.5) { 1.0 } else { -1.0 };
        let leg_h = u * 0.7;
        let body_y = base - leg_h - u * 0.3;
        // Legs.
        for lx in [-0.75, -0.45, 0.45, 0.75] {
            self.fill(
                rect(x + lx * u - u * 0.08, body_y, u * 0.16, leg_h + u * 0.3),
                c,
                1.0,
            );
        }
        self.fill(oval(x, body_y, u * 1.05, u * 0.42), c, 1.0);
        // Neck, head, snout.
        let hx = x + dir * u * 1.05;
        let hy = body_y - u * 0.65;
        self.fill(
            polygon(&[
                (x + dir * u * 0.6, body_y - u * 0.2),
                (hx - dir * u * 0.1, hy),
                (hx + dir * u * 0.15, hy + u * 0.2),
                (x + dir * u * 0.95, body_y + u * 0.1),
            ]),
            c,
            1.0,
        );
        self.fill(circle(hx, hy, u * 0.32), c, 1.0);
        self.fill(
            oval(hx + dir * u * 0.35, hy + u * 0.08, u * 0.25, u * 0.15),
            c,
            1.0,
        );
        if dog {
            self.fill_t(
                oval(0.0, u * 0.2, u * 0.12, u * 0.28),
                c,
                1.0,
                place(dir * 0.35, hx - dir * u * 0.15, hy - u * 0.1),
            );
        } else {
            for k in [0.0, 0.2] {
                self.fill(
                    polygon(&[
                        (hx - dir * u * (0.2 + k), hy - u * 0.2),
                        (hx - dir * u * (0.1 + k), hy - u * 0.6),
                        (hx + dir * u * (0.05 - k), hy - u * 0.25),
                    ]),
                    c,
                    1.0,
                );
            }
        }
        // Tail.
        let tx = x - dir * u * 0.95;
        let mut pb = PathBuilder::new();
        pb.move_to(tx, body_y - u * 0.1);
        pb.quad_to(
            tx - dir * u * 0.5,
            body_y - u * 0.3,
            tx - dir * u * 0.55,
            body_y - u * 0.8,
        );
        self.stroke(pb.finish(), c, 1.0, u * 0.13);
    }

    fn birds(&mut self) {
        let n = self.rng.count(3.0, 9.0, self.density).max(1);
        let limit = self.horizon.min(self.h);
        let c = if self.pal.dark_bg {
            Rgb::hex(0xe8e8f0)
        } else {
            self.silhouette()
        };
        let cx = self.w * self.rng.range(0.2, 0.8);
        let cy = limit * self.rng.range(0.2, 0.5);
        let mut pb = PathBuilder::new();
        let mut width = 0.0;
        for _ in 0..n {
            let x = cx + self.rng.range(-0.3, 0.3) * self.w;
            let y = cy + self.rng.range(-0.15, 0.15) * limit;
            let r = self.s * self.rng.range(0.015, 0.04);
            width = r * 0.15;
            let flap = self.rng.range(-0.3, 0.4) * r;
            pb.move_to(x - r, y - flap);
            pb.quad_to(x - r * 0.45, y - r * 0.45, x, y);
            pb.quad_to(x + r * 0.45, y - r * 0.45, x + r, y - flap);
        }
        self.stroke(pb.finish(), c, 0.9, width.max(0.5));
    }

    fn fish(&mut self) {
        let n = self.rng.count(3.0, 7.0, self.density).max(1);
        for _ in 0..n {
            let x = self.rng.range(0.1, 0.9) * self.w;
            let y = self.rng.range(0.15, 0.85) * self.h;
            let r = self.s * self.rng.range(0.03, 0.08);
            let dir = if self.rng.chance(0.5) { 1.0 } else { -1.0 };
            let c = self.flower_colour();
            let t = place(self.rng.range(-0.25, 0.25), x, y);
            self.fill_t(oval(0.0, 0.0, r, r * 0.5), c, 0.95, t);
            let tail = polygon(&[
                (-dir * r * 0.8, 0.0),
                (-dir * r * 1.5, -r * 0.45),
                (-dir * r * 1.4, r * 0.45),
            ]);
            self.fill_t(tail, c.darken(0.15), 0.95, t);
            self.fill_t(circle(dir * r * 0.55, -r * 0.1, r * 0.08), BLACK, 0.8, t);
        }
    }

    fn face(&mut self) {
        let cx = self.w * (0.5 + self.rng.range(-0.06, 0.06));
        let hr = self.s * self.rng.range(0.15, 0.2);
        let cy = self.h * 0.42;
        let behind = self.pal.contrast(0.4);
        self.glow(cx, cy, hr * 3.0, behind.lighten(0.3), 0.45);
        let c = self
            .pal
            .darkest()
            .darken(if self.pal.dark_bg { 0.2 } else { 0.5 });
        let rim = self.pal.acc(1).lighten(0.3);
        // Shoulders and neck.
        let sy = cy + hr * 2.1;
        let mut pb = PathBuilder::new();
        pb.move_to(cx - hr * 2.6, self.h + 2.0);
        pb.cubic_to(
            cx - hr * 2.4,
            sy,
            cx - hr * 1.2,
            sy - hr * 0.2,
            cx - hr * 0.45,
            sy - hr * 0.4,
        );
        pb.line_to(cx - hr * 0.42, cy + hr * 0.9);
        pb.line_to(cx + hr * 0.42, cy + hr * 0.9);
        pb.line_to(cx + hr * 0.45, sy - hr * 0.4);
        pb.cubic_to(
            cx + hr * 1.2,
            sy - hr * 0.2,
            cx + hr * 2.4,
            sy,
            cx + hr * 2.6,
            self.h + 2.0,
        );
        pb.close();
        let body = pb.finish();
        let sh = linear(
            (cx - hr * 2.0, 0.0),
            (cx + hr * 2.0, 0.0),
            &[(0.0, c.lighten(0.12), 1.0), (1.0, c, 1.0)],
        );
        self.fill_shader(body, sh, c);
        // Rim light then head.
        self.fill(oval(cx - hr * 0.05, cy, hr * 0.8, hr * 1.05), rim, 0.9);
        let sh = linear(
            (cx - hr, cy),
            (cx + hr, cy),
            &[(0.0, c.lighten(0.15), 1.0), (1.0, c, 1.0)],
        );
        self.fill_shader(
            oval(cx + hr * 0.02, cy + hr * 0.02, hr * 0.8, hr * 1.05),
            sh,
            c,
        );
        // Hair / headwrap shape for variety.
        if self.rng.chance(0.6) {
            let hair = c.mix(self.pal.acc(0), 0.25).darken(0.2);
            let mut pb = PathBuilder::new();
            pb.move_to(cx - hr * 0.9, cy + hr * 0.1);
            pb.cubic_to(
                cx - hr * 1.1,
                cy - hr * 1.3,
                cx + hr * 1.1,
                cy - hr * 1.4,
                cx + hr * 0.9,
                cy + hr * 0.1,
            );
            pb.cubic_to(
                cx + hr * 0.7,
                cy - hr * 0.6,
                cx - hr * 0.7,
                cy - hr * 0.7,
                cx - hr * 0.9,
                cy + hr * 0.1,
            );
            pb.close();
            self.fill(pb.finish(), hair, 1.0);
        }
    }

    fn grid(&mut self, weight: f32) {
        if self.horizon < self.h && (self.m.retro || self.m.neon) {
            self.floor_grid();
            return;
        }
        let cols = (4 + self.rng.below(7)) as f32;
        let cell = self.w / cols;
        let rows = ((self.h / cell).ceil() as usize).min(64);
        let gap = cell * 0.06;
        let fill_p = 0.55 * weight.min(1.0) * self.density.min(1.5);
        for r in 0..rows {
            for k in 0..cols as usize {
                if !self.rng.chance(fill_p) {
                    continue;
                }
                let x = k as f32 * cell + gap;
                let y = r as f32 * cell + gap;
                let sz = cell - 2.0 * gap;
                let c = self.pal.acc(self.rng.below(self.pal.acc.len()));
                let a = self.rng.range(0.55, 0.95);
                match self.rng.below(4) {
                    0 => self.fill(circle(x + sz / 2.0, y + sz / 2.0, sz / 2.0), c, a),
                    1 => {
                        // Quarter disc from a random corner.
                        let (ox, oy) = match self.rng.below(4) {
                            0 => (x, y),
                            1 => (x + sz, y),
                            2 => (x, y + sz),
                            _ => (x + sz, y + sz),
                        };
                        let mut pb = PathBuilder::new();
                        pb.move_to(ox, oy);
                        let start = match (ox > x, oy > y) {
                            (false, false) => 0.0,
                            (true, false) => HALF_PI,
                            (true, true) => PI,
                            (false, true) => PI + HALF_PI,
                        };
                        for j in 0..=8 {
                            let an = start + HALF_PI * j as f32 / 8.0;
                            pb.line_to(ox + cos(an) * sz, oy + sin(an) * sz);
                        }
                        pb.close();
                        self.fill(pb.finish(), c, a);
                    }
                    2 => self.fill(
                        polygon(&[(x, y + sz), (x + sz / 2.0, y), (x + sz, y + sz)]),
                        c,
                        a,
                    ),
                    _ => self.fill(rect(x, y, sz, sz), c, a),
                }
            }
        }
    }

    /// Perspective neon floor below the horizon.
    fn floor_grid(&mut self) {
        let top = self.horizon;
        let c = self.pal.acc(1).lighten(0.2);
        let mut pb = PathBuilder::new();
        let vx = self.w / 2.0;
        for k in -12..=12 {
            let bx = vx + k as f32 * self.w * 0.12;
            pb.move_to(vx + (bx - vx) * 0.05, top);
            pb.line_to(bx, self.h);
        }
        for k in 1..12 {
            let t = k as f32 / 12.0;
            let y = top + (self.h - top) * t * t;
            pb.move_to(0.0, y);
            pb.line_to(self.w, y);
        }
        let p = pb.finish();
        if let Some(p) = &p {
            self.stroke(Some(p.clone()), c, 0.25, self.s * 0.01);
        }
        self.stroke(p, c, 0.85, (self.s * 0.0025).max(0.5));
    }

    fn cubes(&mut self, weight: f32) {
        let a = self.s * self.rng.range(0.06, 0.11) * weight.max(0.5);
        let dx = a * 0.866;
        let n = self.rng.count(5.0, 12.0, self.density * weight);
        let base = self.pal.acc(self.rng.below(self.pal.acc.len()));
        let cx = self.w * self.rng.range(0.3, 0.7);
        let cy = self.h * self.rng.range(0.35, 0.65);
        let mut cells: Vec<(i32, i32)> = Vec::new();
        for _ in 0..n {
            let (mut i, mut j) = (0i32, 0i32);
            for _ in 0..4 {
                match self.rng.below(3) {
                    0 => i += 1,
                    1 => j += 1,
                    _ => i -= 1,
                }
            }
            if !cells.contains(&(i, j)) {
                cells.push((i, j));
            }
        }
        // Back to front.
        cells.sort_by_key(|&(i, j)| (j, i));
        for (i, j) in cells {
            let x = cx + (i - j) as f32 * dx;
            let y = cy + (i + j) as f32 * a * 0.5 - (i.abs() as f32) * a * 0.1;
            let top = [
                (x, y - a),
                (x + dx, y - a * 0.5),
                (x, y),
                (x - dx, y - a * 0.5),
            ];
            let left = [
                (x - dx, y - a * 0.5),
                (x, y),
                (x, y + a),
                (x - dx, y + a * 0.5),
            ];
            let right = [
                (x, y),
                (x + dx, y - a * 0.5),
                (x + dx, y + a * 0.5),
                (x, y + a),
            ];
            self.fill(polygon(&top), base.lighten(0.35), 0.95);
            self.fill(polygon(&left), base, 0.95);
            self.fill(polygon(&right), base.darken(0.35), 0.95);
        }
    }

    fn spiral(&mut self, weight: f32) {
        let cx = self.w * self.rng.range(0.3, 0.7);
        let cy = self.h * self.rng.range(0.3, 0.7);
        let turns = self.rng.range(2.5, 5.0);
        let rmax = self.s * self.rng.range(0.2, 0.42) * weight.max(0.5);
        let rot = self.rng.range(0.0, TAU);
        let c = self.pal.contrast(cy / self.h);
        let segs = 4;
        for seg in 0..segs {
            let mut pb = PathBuilder::new();
            let steps = 60;
            for k in 0..=steps {
                let t = (seg as f32 + k as f32 / steps as f32) / segs as f32;
                let a = rot + t * turns * TAU;
                let r = t * rmax;
                let (x, y) = (cx + cos(a) * r, cy + sin(a) * r);
                if k == 0 {
                    pb.move_to(x, y);
                } else {
                    pb.line_to(x, y);
                }
            }
            let wdt = self.s * 0.006 * (1.0 + seg as f32 * 1.2);
            self.stroke(pb.finish(), c.mix(self.pal.acc(seg), 0.3), 0.85, wdt);
        }
    }

    fn stripes(&mut self, weight: f32) {
        let n = self.rng.count(4.0, 9.0, self.density * weight).max(2);
        let horizontal = self.m.calm || self.rng.chance(0.5);
        let slope = if horizontal {
            self.rng.range(-0.05, 0.05)
        } else {
            self.rng.range(-0.6, 0.6)
        };
        for _ in 0..n {
            let y = self.rng.range(-0.1, 1.1) * self.h;
            let th = self.s * self.rng.range(0.01, 0.08) * weight.max(0.4);
            let c = self.pal.acc(self.rng.below(self.pal.acc.len()));
            let dy = slope * self.w;
            let a = self.rng.range(0.25, 0.6);
            self.fill(
                polygon(&[
                    (0.0, y),
                    (self.w, y + dy),
                    (self.w, y + dy + th),
                    (0.0, y + th),
                ]),
                c,
                a,
            );
        }
    }

    fn dots(&mut self, weight: f32) {
        let spacing = self.s * self.rng.range(0.03, 0.06);
        let cx = self.w * self.rng.range(0.0, 1.0);
        let cy = self.h * self.rng.range(0.0, 1.0);
        let reach = self.s * self.rng.range(0.4, 0.8) * weight.max(0.5);
        let c = self.pal.contrast(0.5);
        let mut pb = PathBuilder::new();
        let cols = (self.w / spacing) as usize + 1;
        let rows = (self.h / spacing) as usize + 1;
        for j in 0..rows.min(200) {
            for i in 0..cols.min(200) {
                let x = (i as f32 + 0.5) * spacing;
                let y = (j as f32 + 0.5) * spacing;
                let d = ((x - cx) * (x - cx) + (y - cy) * (y - cy)).sqrt();
                let r = spacing * 0.42 * (1.0 - d / reach);
                if r > spacing * 0.04 {
                    pb.push_circle(x, y, r);
                }
            }
        }
        self.fill(pb.finish(), c, 0.7);
    }

    fn bubbles(&mut self, weight: f32) {
        let n = self.rng.count(8.0, 20.0, self.density * weight).max(2);
        for _ in 0..n {
            let x = self.rng.range(0.05, 0.95) * self.w;
            let y = self.rng.range(0.05, 0.95) * self.h;
            let r = self.s * self.rng.range(0.015, 0.07);
            let c = self
                .pal
                .acc(self.rng.below(self.pal.acc.len()))
                .lighten(0.4);
            self.fill(circle(x, y, r), c, 0.15);
            self.stroke(circle(x, y, r), c, 0.6, (r * 0.06).max(0.5));
            self.fill(
                oval(x - r * 0.35, y - r * 0.4, r * 0.25, r * 0.15),
                WHITE,
                0.7,
            );
        }
    }

    fn hearts(&mut self, weight: f32) {
        let n = self.rng.count(2.0, 6.0, self.density * weight).max(1);
        for i in 0..n {
            let big = i == 0 && weight >= 1.0;
            let x = self.w * if big { 0.5 } else { self.rng.range(0.1, 0.9) };
            let y = self.h * if big { 0.47 } else { self.rng.range(0.1, 0.9) };
            let r = self.s
                * if big {
                    self.rng.range(0.15, 0.22)
                } else {
                    self.rng.range(0.03, 0.08)
                };
            let c = self.pal.acc(self.rng.below(2));
            let mut pb = PathBuilder::new();
            pb.move_to(x, y + r);
            pb.cubic_to(
                x - r * 1.6,
                y - r * 0.1,
                x - r * 0.9,
                y - r * 1.3,
                x,
                y - r * 0.45,
            );
            pb.cubic_to(x + r * 0.9, y - r * 1.3, x + r * 1.6, y - r * 0.1, x, y + r);
            pb.close();
            if big {
                self.glow(x, y, r * 2.5, c, 0.3);
            }
            self.fill(pb.finish(), c, if big { 1.0 } else { 0.75 });
        }
    }

    fn arcs(&mut self, weight: f32) {
        let cx = self.w * self.rng.range(0.2, 0.8);
        let cy = self.h * self.rng.range(0.6, 1.0);
        let n = self.rng.count(3.0, 7.0, weight.max(0.5)).max(2);
        let r0 = self.s * self.rng.range(0.15, 0.3);
        let wdt = self.s * self.rng.range(0.025, 0.05);
        for k in 0..n {
            let r = r0 + k as f32 * wdt * 1.05;
            let mut pb = PathBuilder::new();
            for j in 0..=40 {
                let a = PI + PI * j as f32 / 40.0;
                let (x, y) = (cx + cos(a) * r, cy + sin(a) * r);
                if j == 0 {
                    pb.move_to(x, y);
                } else {
                    pb.line_to(x, y);
                }
            }
            let c = self.pal.acc(k);
            self.stroke(pb.finish(), c, 0.85, wdt);
        }
    }

    // -- Abstract families --------------------------------------------------

    fn family(&mut self, s: Subj, weight: f32) {
        let n = self.rng.count(3.0, 7.0, self.density * weight).max(1);
        for _ in 0..n {
            let x = self.rng.range(0.05, 0.95) * self.w;
            let y = self.rng.range(0.05, 0.95) * self.h;
            let r = self.s * self.rng.range(0.04, 0.16) * weight.max(0.4);
            let c = self.pal.acc(self.rng.below(self.pal.acc.len()));
            let a = self.rng.range(0.45, 0.85);
            match s {
                Subj::Rings => {
                    self.stroke(circle(x, y, r), c, a, r * 0.15);
                }
                Subj::Triangles | Subj::Polys => {
                    let k = if s == Subj::Triangles {
                        3
                    } else {
                        5 + self.rng.below(3)
                    };
                    let rot = self.rng.range(0.0, TAU);
                    let pts: Vec<(f32, f32)> = (0..k)
                        .map(|i| {
                            let ang = rot + i as f32 * TAU / k as f32;
                            (x + cos(ang) * r, y + sin(ang) * r)
                        })
                        .collect();
                    self.fill(polygon(&pts), c, a);
                }
                _ => {
                    self.blob(x, y, r, c, a);
                }
            }
        }
    }

    fn blob(&mut self, x: f32, y: f32, r: f32, c: Rgb, a: f32) {
        let k = 7;
        let rot = self.rng.range(0.0, TAU);
        let pts: Vec<(f32, f32)> = (0..k)
            .map(|i| {
                let ang = rot + i as f32 * TAU / k as f32;
                let rr = r * self.rng.range(0.7, 1.2);
                (x + cos(ang) * rr, y + sin(ang) * rr)
            })
            .collect();
        let mut pb = PathBuilder::new();
        let mid = |p: (f32, f32), q: (f32, f32)| ((p.0 + q.0) / 2.0, (p.1 + q.1) / 2.0);
        let start = mid(pts[k - 1], pts[0]);
        pb.move_to(start.0, start.1);
        for i in 0..k {
            let m = mid(pts[i], pts[(i + 1) % k]);
            pb.quad_to(pts[i].0, pts[i].1, m.0, m.1);
        }
        pb.close();
        self.fill(pb.finish(), c, a);
    }

    /// Soft horizontal bands for calm pictures.
    fn calm_bands(&mut self) {
        let n = self.rng.count(3.0, 6.0, 1.0);
        for _ in 0..n {
            let y = self.rng.range(0.05, 0.95) * self.h;
            let th = self.h * self.rng.range(0.02, 0.08);
            let c = self
                .pal
                .acc(self.rng.below(self.pal.acc.len()))
                .lighten(0.3);
            let sh = linear(
                (0.0, y - th),
                (0.0, y + th),
                &[(0.0, c, 0.0), (0.5, c, 0.3), (1.0, c, 0.0)],
            );
            self.fill_shader(rect(0.0, y - th, self.w, 2.0 * th), sh, c);
        }
    }

    fn abstract_overlay(&mut self) {
        let n = self.rng.count(4.0, 8.0, self.density);
        for _ in 0..n {
            let x = self.rng.range(0.0, self.w);
            let y = self.rng.range(0.0, self.h);
            let r = self.s * self.rng.range(0.1, 0.3);
            let c = self.pal.acc(self.rng.below(self.pal.acc.len()));
            self.blob(x, y, r, c, 0.3);
        }
    }

    fn vignette(&mut self) {
        let (w, h) = (self.w, self.h);
        let r = (w * w + h * h).sqrt() * 0.62;
        let a = if self.m.pastel { 0.12 } else { 0.3 };
        let sh = radial(
            (w / 2.0, h / 2.0),
            r.max(1.0),
            &[(0.0, BLACK, 0.0), (0.6, BLACK, 0.0), (1.0, BLACK, a)],
        );
        // Only the ring outside 60% of the radius is shaded: skip the centre.
        let mut pb = PathBuilder::new();
        if let Some(full) = Rect::from_xywh(0.0, 0.0, w, h) {
            pb.push_rect(full);
        }
        pb.push_circle(w / 2.0, h / 2.0, r * 0.6);
        if let (Some(path), Some(shader)) = (pb.finish(), sh) {
            let paint = Paint {
                shader,
                anti_alias: true,
                ..Default::default()
            };
            self.pm.fill_path(
                &path,
                &paint,
                FillRule::EvenOdd,
                Transform::identity(),
                None,
            );
        }
    }
}

#[cfg(test)]
mod tests {
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
}
