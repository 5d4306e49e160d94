//! The vocabulary: what each known word means (colours, subjects, moods), with
//! simple plural / adjective normalisation for lookups.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Subj {
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
pub(super) const MAX_SUBJECTS: usize = 6;

/// Shape families an unknown word may contribute.
pub(super) const FAMILIES: [Subj; 9] = [
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
pub(super) enum Mood {
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

/// One trait a word carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tr {
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
pub(super) fn lookup(w: &str) -> Option<&'static [Tr]> {
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
pub(super) fn lookup_word(w: &str) -> Option<&'static [Tr]> {
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
