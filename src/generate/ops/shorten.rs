//! Shorten: shorter prompts that keep what matters. Midjourney parameters (`--ar 16:9`,
//! `--no ...`), `::` weights and image URLs go; stopwords and the usual quality filler
//! ("highly detailed", "8k", "trending on artstation") go; the remaining words keep their order.
//! Commas, `::` and prepositions split the prompt into phrases; a phrase's last word is taken
//! as its head noun. Shorter versions drop modifiers first, then later phrases.

/// Words that carry no content.
const STOPWORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "of",
    "and",
    "or",
    "with",
    "in",
    "on",
    "at",
    "by",
    "for",
    "to",
    "from",
    "into",
    "onto",
    "over",
    "under",
    "above",
    "below",
    "behind",
    "beside",
    "near",
    "through",
    "during",
    "is",
    "are",
    "was",
    "be",
    "its",
    "it",
    "this",
    "that",
    "these",
    "those",
    "very",
    "really",
    "extremely",
    "super",
    "ultra",
    "highly",
    "incredibly",
    "so",
    "some",
    "beautiful",
    "gorgeous",
    "stunning",
    "amazing",
    "awesome",
    "epic",
    "masterpiece",
    "8k",
    "4k",
    "16k",
    "hd",
    "uhd",
    "hdr",
    "trending",
    "artstation",
    "featured",
    "pixiv",
    "cgsociety",
    "deviantart",
];

/// Filler phrases removed as a whole (lowercase, space separated).
const FILLER_PHRASES: &[&str] = &[
    "highly detailed",
    "ultra detailed",
    "hyper detailed",
    "extremely detailed",
    "very detailed",
    "insanely detailed",
    "trending on artstation",
    "trending on pixiv",
    "featured on artstation",
    "octane render",
    "unreal engine 5",
    "unreal engine",
    "award winning",
    "award-winning",
    "best quality",
    "high quality",
    "ultra realistic",
    "ultra hd",
    "sharp focus",
];

/// Words that start a new phrase (and are dropped themselves).
const BREAKS: &[&str] = &[
    "and", "or", "with", "in", "on", "at", "by", "for", "to", "from", "into", "onto", "over",
    "under", "above", "below", "behind", "beside", "near", "through", "during", "of",
];

/// Midjourney parameters that take one value.
const VALUED: &[&str] = &[
    "ar", "aspect", "v", "version", "seed", "sameseed", "s", "stylize", "c", "chaos", "q",
    "quality", "iw", "stop", "style", "weird", "w", "niji", "sref", "cref", "sw", "cw", "r",
    "repeat", "p", "profile", "sv",
];

/// One token of the prompt after parameter stripping: a word, or a phrase break.
enum Tok {
    Word(String),
    Break,
}

/// Strip leading and trailing punctuation, keeping inner hyphens and apostrophes.
fn clean(word: &str) -> &str {
    word.trim_matches(|c: char| !c.is_alphanumeric())
}

fn is_param(tok: &str) -> Option<&str> {
    tok.strip_prefix("--")
        .or_else(|| tok.strip_prefix('\u{2014}'))
        .filter(|name| !name.is_empty())
}

/// The prompt as words and phrase breaks, with parameters, weights and URLs removed.
fn tokens(prompt: &str) -> Vec<Tok> {
    let raw: Vec<&str> = prompt.split_whitespace().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        let t = raw[i];
        i += 1;
        if let Some(name) = is_param(t) {
            let name = name.to_ascii_lowercase();
            if name == "no" {
                // `--no a, b c` negates everything up to the next parameter.
                while i < raw.len() && is_param(raw[i]).is_none() {
                    i += 1;
                }
            } else if i < raw.len()
                && is_param(raw[i]).is_none()
                && (VALUED.contains(&name.as_str()) || raw[i].chars().any(|c| c.is_ascii_digit()))
            {
                i += 1;
            }
            out.push(Tok::Break);
            continue;
        }
        let lower = t.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            out.push(Tok::Break);
            continue;
        }
        // `cat::2 dog` weights: the text before `::` is a word, what follows is a new phrase.
        let (text, weighted) = match t.find("::") {
            Some(p) => (&t[..p], true),
            None => (t, false),
        };
        let word = clean(text);
        if !word.is_empty() {
            out.push(Tok::Word(word.to_string()));
        }
        if weighted || text.ends_with([',', ';', '.', '|', ':', '!', '?']) {
            out.push(Tok::Break);
        }
    }
    out
}

/// Phrases of important words, in order, each word once.
fn phrases(prompt: &str) -> Vec<Vec<String>> {
    let toks = tokens(prompt);
    let lower: Vec<Option<String>> = toks
        .iter()
        .map(|t| match t {
            Tok::Word(w) => Some(w.to_lowercase()),
            Tok::Break => None,
        })
        .collect();
    // Mark words that belong to a filler phrase.
    let mut filler = vec![false; toks.len()];
    for phrase in FILLER_PHRASES {
        let parts: Vec<&str> = phrase.split(' ').collect();
        for start in 0..toks.len() {
            if start + parts.len() <= toks.len()
                && parts
                    .iter()
                    .enumerate()
                    .all(|(j, p)| lower[start + j].as_deref() == Some(*p))
            {
                filler[start..start + parts.len()]
                    .iter_mut()
                    .for_each(|f| *f = true);
            }
        }
    }
    let mut seen: Vec<String> = Vec::new();
    let mut out: Vec<Vec<String>> = vec![Vec::new()];
    for (i, t) in toks.iter().enumerate() {
        let cur_empty = out.last().is_none_or(|p| p.is_empty());
        match t {
            Tok::Break => {
                if !cur_empty {
                    out.push(Vec::new());
                }
            }
            Tok::Word(w) => {
                let l = lower[i].as_deref().unwrap_or_default();
                if BREAKS.contains(&l) {
                    if !cur_empty {
                        out.push(Vec::new());
                    }
                    continue;
                }
                if filler[i] || STOPWORDS.contains(&l) || seen.iter().any(|s| s == l) {
                    continue;
                }
                seen.push(l.to_string());
                if let Some(p) = out.last_mut() {
                    p.push(w.clone());
                }
            }
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// The important words of `prompt`, in order: what [`shorten`] keeps (no parameters, weights,
/// stopwords or filler; each word once, as written, without surrounding punctuation).
pub fn important_words(prompt: &str) -> Vec<String> {
    phrases(prompt).into_iter().flatten().collect()
}

/// Words that name how a picture is made rather than what it shows.
const MEDIUMS: &[&str] = &[
    "painting",
    "photo",
    "photograph",
    "illustration",
    "drawing",
    "render",
    "rendering",
    "picture",
    "image",
    "sketch",
    "poster",
    "watercolor",
    "watercolour",
    "artwork",
];

/// Up to five shorter prompts keeping `prompt`'s important words, longest first, distinct and
/// non-empty, each strictly shorter than the trimmed original when it has more than one word.
/// A one-word prompt gives that word; a prompt with no words gives none.
pub fn shorten(prompt: &str) -> Vec<String> {
    let original = prompt.trim();
    let original_len = original.chars().count();
    let many = original.split_whitespace().count() > 1;
    let groups = phrases(prompt);
    if groups.is_empty() {
        // Only filler or parameters: fall back to the first word that is not a parameter.
        let first = tokens(prompt).into_iter().find_map(|t| match t {
            Tok::Word(w) => Some(w),
            Tok::Break => None,
        });
        return first
            .filter(|w| !many || w.chars().count() < original_len)
            .into_iter()
            .collect();
    }
    let head = |g: &Vec<String>| g.last().cloned().unwrap_or_default();
    let join = |gs: Vec<String>| gs.join(", ");
    // "a painting of a lighthouse": the medium alone says little; the subject is the phrase
    // after it, so the shortest versions keep that one.
    let medium_only = groups.len() > 1
        && groups[0]
            .last()
            .is_some_and(|w| MEDIUMS.contains(&w.to_lowercase().as_str()));
    let first = if medium_only { &groups[1] } else { &groups[0] };
    let heads: Vec<String> = groups.iter().map(head).collect();
    // In order of importance; the first five distinct ones that fit are kept.
    let candidates = vec![
        join(groups.iter().map(|g| g.join(" ")).collect()),
        join(
            std::iter::once(first.join(" "))
                .chain(heads[1..].iter().cloned())
                .collect(),
        ),
        join(heads.clone()),
        join(heads.iter().take(2).cloned().collect()),
        first.join(" "),
        first[first.len().saturating_sub(2)..].join(" "),
        head(first),
        first[0].clone(),
        // The last phrase's head alone, when there is room for it.
        heads[heads.len() - 1].clone(),
    ];
    let fits = |c: &String| !c.is_empty() && (!many || c.chars().count() < original_len);
    let mut out: Vec<String> = Vec::new();
    for c in candidates {
        if out.len() < 5 && fits(&c) && !out.contains(&c) {
            out.push(c);
        }
    }
    // Longest first; the sort is stable, so equal lengths keep the order of importance above.
    out.sort_by_key(|c| std::cmp::Reverse(c.chars().count()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subject_outlasts_the_medium() {
        let s = shorten("a detailed painting of a lighthouse on a rocky coast at sunset");
        assert!(s.iter().all(|p| p.contains("lighthouse")), "{s:?}");
        let s = shorten("a detailed painting of a lighthouse at sunset");
        assert!(s.iter().all(|p| p.contains("lighthouse")), "{s:?}");
    }

    #[test]
    fn drops_parameters_stopwords_and_filler() {
        let p = "a very beautiful red fox in a snowy forest, highly detailed, 8k, trending on \
                 artstation --ar 16:9 --v 6 --seed 3";
        assert_eq!(important_words(p), ["red", "fox", "snowy", "forest"]);
        let s = shorten(p);
        assert!(!s.is_empty() && s.len() <= 5, "{s:?}");
        assert_eq!(s[0], "red fox, snowy forest");
        for (i, v) in s.iter().enumerate() {
            assert!(v.len() < p.len());
            assert!(
                !v.contains("--") && !v.contains("16:9") && !v.contains("8k"),
                "{v}"
            );
            assert!(!v
                .split([' ', ','])
                .any(|w| w == "a" || w == "the" || w == "very"));
            assert!(
                s[i + 1..].iter().all(|o| o != v && o.len() <= v.len()),
                "{s:?}"
            );
        }
        assert!(s.contains(&"fox".to_string()), "{s:?}");
    }

    #[test]
    fn weights_urls_and_no() {
        let p = "https://example.com/a.png cat::2 dog::0.5 --no trees, cars --stylize 250";
        assert_eq!(important_words(p), ["cat", "dog"]);
        assert_eq!(shorten(p), ["cat, dog", "cat", "dog"]);
        assert_eq!(important_words("sunrise \u{2014}ar 3:2"), ["sunrise"]);
        assert_eq!(important_words("castle --tile moat"), ["castle", "moat"]);
    }

    #[test]
    fn one_word_and_degenerate() {
        assert_eq!(shorten("lighthouse"), ["lighthouse"]);
        assert_eq!(shorten("  Lighthouse!  "), ["Lighthouse"]);
        assert_eq!(shorten("the"), ["the"]);
        assert!(shorten("").is_empty());
        assert!(shorten("--ar 16:9").is_empty());
        assert_eq!(shorten("cat --ar 16:9"), ["cat"]);
        assert_eq!(shorten("cat dog"), ["dog", "cat"]);
    }

    #[test]
    fn always_shorter_and_distinct() {
        for p in [
            "portrait of an old fisherman with a pipe, dramatic lighting, oil painting",
            "cyberpunk city street at night in the rain, neon signs, reflections",
            "a b c",
            "red, red, red",
            "misty mountains",
        ] {
            let s = shorten(p);
            assert!(!s.is_empty(), "{p}");
            for (i, v) in s.iter().enumerate() {
                assert!(!v.is_empty());
                assert!(v.chars().count() < p.chars().count(), "{p}: {v}");
                assert!(!s[i + 1..].contains(v));
            }
        }
        assert_eq!(
            important_words("cyberpunk city street at night in the rain"),
            ["cyberpunk", "city", "street", "night", "rain"]
        );
    }
}
