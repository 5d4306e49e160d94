//! A prompt parsed into a theme: the colours, subjects and mood flags its words
//! carry, plus a hue and shape family for each unknown word.

use super::color::Rgb;
use super::rng::fnv;
use super::vocab::{lookup_word, Mood, Subj, Tr, FAMILIES};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Mods {
    pub(super) dark: bool,
    pub(super) bright: bool,
    pub(super) pastel: bool,
    pub(super) neon: bool,
    pub(super) mono: bool,
    pub(super) muted: bool,
    pub(super) minimal: bool,
    pub(super) busy: bool,
    pub(super) calm: bool,
    pub(super) abstract_: bool,
    pub(super) land: bool,
    pub(super) night: bool,
    pub(super) tall: bool,
    pub(super) warm: bool,
    pub(super) cool: bool,
    pub(super) snowcap: bool,
    pub(super) sunset: bool,
    pub(super) retro: bool,
}

impl Mods {
    pub(super) fn set(&mut self, m: Mood) {
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

#[derive(Default)]
pub(super) struct Theme {
    pub(super) named: Vec<Rgb>,
    pub(super) themed: Vec<Rgb>,
    pub(super) sky: Vec<Rgb>,
    pub(super) bg: Vec<Rgb>,
    pub(super) unknown: Vec<(Rgb, Subj)>,
    pub(super) subjects: Vec<Subj>,
    pub(super) m: Mods,
    /// Subjects that must not be drawn (`--no`), whatever else asks for them.
    pub(super) without: Vec<Subj>,
}

impl Theme {
    pub(super) fn parse(prompt: &str) -> Theme {
        Theme::parse_without(prompt, "")
    }

    /// The theme of `prompt` without what `without` names (`--no`): its words are skipped in
    /// the prompt, and the subjects they mean are never drawn.
    pub(super) fn parse_without(prompt: &str, without: &str) -> Theme {
        let mut t = Theme::default();
        let skipped = lower_words(without);
        if !without.is_empty() {
            t.without = Theme::parse(without).subjects;
        }
        let mut bg_window = 0u32;
        let mut sky_prio = 0u8;
        for word in lower_words(prompt)
            .into_iter()
            .filter(|w| !skipped.contains(w))
            .take(256)
        {
            let word = word.as_str();
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

/// The lowercase words of `text` (its first 4096 characters), split at anything but letters and
/// digits.
fn lower_words(text: &str) -> Vec<String> {
    let lower: String = text
        .chars()
        .take(4096)
        .flat_map(char::to_lowercase)
        .collect();
    lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

pub(super) fn push_unique(v: &mut Vec<Rgb>, c: Rgb) {
    if !v.contains(&c) && v.len() < 12 {
        v.push(c);
    }
}
