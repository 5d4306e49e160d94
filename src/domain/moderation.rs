//! The moderation matcher: named lists of terms (words, phrases, `re:` patterns) matched against
//! a prompt as a reader would see it, not as its bytes are spelled.
//!
//! Both the terms and the prompt are brought to one form first: Unicode compatibility forms
//! folded (NFKC: full-width `ｎｕｄｅ` is `nude`), accents removed, case folded, zero-width and
//! other format characters removed, everything that is not a letter or digit a separator, and a
//! run of two or more single letters joined (`n u d e`, `n.u.d.e` are `nude`). Words and
//! phrases then match whole words only, so `Scunthorpe` and `nudibranch` pass a list holding
//! `cunt` and `nude`. Patterns run on the words joined by single spaces, with the `regex`
//! crate: no backtracking (time linear in the prompt), each compiled once under a size limit.

use std::collections::HashMap;

use regex::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};
use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;

/// The most terms one list may hold.
pub const TERMS_MAX: usize = 20_000;
/// The longest term, in characters (a pattern's `re:` included).
pub const TERM_MAX_CHARS: usize = 256;
/// The longest list name, in characters.
pub const LIST_NAME_MAX_CHARS: usize = 64;
/// The longest word looked for spelled out letter by letter.
const SPELLED_MAX: usize = 32;
/// The most memory one compiled pattern may take.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// A named list of terms, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TermList {
    pub name: String,
    pub terms: Vec<String>,
}

/// What matched: the list's name and the term as written in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Match<'a> {
    pub list: &'a str,
    pub term: &'a str,
}

/// The lists, compiled for matching.
#[derive(Debug, Default)]
pub struct Matcher {
    names: Vec<String>,
    /// Words and phrases by their first word: the rest of the phrase, its list, its term.
    words: HashMap<String, Vec<(Vec<String>, usize, String)>>,
    patterns: Vec<(Regex, usize, String)>,
    /// Every pattern in one set, so that a prompt is scanned once, not once per pattern; None
    /// when there are none (or the set would pass the size limit: each is then tried alone).
    set: Option<RegexSet>,
}

/// Whether `name` may name a list: 1 to 64 of `a-z`, `0-9`, `-`, `_`.
pub fn check_list_name(name: &str) -> Result<(), String> {
    let fits = (1..=LIST_NAME_MAX_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if fits {
        Ok(())
    } else {
        Err(format!(
            "must be 1 to {LIST_NAME_MAX_CHARS} characters of a-z, 0-9, - and _"
        ))
    }
}

impl Matcher {
    /// Compile `lists`; the first term that cannot be used is the error, naming its list.
    pub fn build(lists: &[TermList]) -> Result<Matcher, String> {
        let mut matcher = Matcher::default();
        for (i, list) in lists.iter().enumerate() {
            check_list_name(&list.name).map_err(|e| format!("list {:?}: {e}", list.name))?;
            if list.terms.len() > TERMS_MAX {
                return Err(format!(
                    "list {:?}: at most {TERMS_MAX} terms (got {})",
                    list.name,
                    list.terms.len()
                ));
            }
            matcher.names.push(list.name.clone());
            for term in &list.terms {
                matcher
                    .add(i, term)
                    .map_err(|e| format!("list {:?}: term {term:?}: {e}", list.name))?;
            }
        }
        if !matcher.patterns.is_empty() {
            let limit = PATTERN_SIZE_LIMIT.saturating_mul(matcher.patterns.len());
            matcher.set = RegexSetBuilder::new(matcher.patterns.iter().map(|(r, _, _)| r.as_str()))
                .size_limit(limit)
                .dfa_size_limit(limit)
                .build()
                .ok();
        }
        Ok(matcher)
    }

    fn add(&mut self, list: usize, term: &str) -> Result<(), String> {
        let chars = term.chars().count();
        if chars > TERM_MAX_CHARS {
            return Err(format!("at most {TERM_MAX_CHARS} characters (got {chars})"));
        }
        if let Some(pattern) = term.strip_prefix("re:") {
            let regex = RegexBuilder::new(pattern)
                .size_limit(PATTERN_SIZE_LIMIT)
                .dfa_size_limit(PATTERN_SIZE_LIMIT)
                .build()
                .map_err(|e| format!("is not a pattern the regex crate compiles: {e}"))?;
            self.patterns.push((regex, list, term.to_string()));
            return Ok(());
        }
        let mut words = words(term);
        if words.is_empty() {
            return Err("has no letters or digits".into());
        }
        let first = words.remove(0);
        self.words
            .entry(first)
            .or_default()
            .push((words, list, term.to_string()));
        Ok(())
    }

    /// Whether there is nothing to match.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty() && self.patterns.is_empty()
    }

    /// The first term of a list that `applies` which `text` holds.
    pub fn find(&self, text: &str, applies: impl Fn(&str) -> bool) -> Option<Match<'_>> {
        if self.is_empty() {
            return None;
        }
        let plain = words(text);
        if let Some(found) = self.find_in(&plain, &applies) {
            return Some(found);
        }
        if let Some(found) = self.find_spelled_out(&plain, &applies) {
            return Some(found);
        }
        let joined = join_spelled_out(&plain)?;
        self.find_in(&joined, &applies)
    }

    /// A one-word term spelled out letter by letter inside a run of one-letter words (`a n s f
    /// w cat` holds `nsfw`): every stretch of 2 to [`SPELLED_MAX`] letters of the run.
    fn find_spelled_out(
        &self,
        words: &[String],
        applies: &impl Fn(&str) -> bool,
    ) -> Option<Match<'_>> {
        let single = |w: &String| w.chars().nth(1).is_none();
        let mut start = 0;
        while start < words.len() {
            let run = words[start..].iter().take_while(|w| single(w)).count();
            for i in start..start + run {
                let mut spelled = String::new();
                for (n, letter) in words[i..start + run].iter().take(SPELLED_MAX).enumerate() {
                    spelled.push_str(letter);
                    if n == 0 {
                        continue;
                    }
                    let found = self.words.get(&spelled).and_then(|entries| {
                        entries
                            .iter()
                            .find(|(rest, list, _)| rest.is_empty() && applies(&self.names[*list]))
                    });
                    if let Some((_, list, term)) = found {
                        return Some(Match {
                            list: &self.names[*list],
                            term,
                        });
                    }
                }
            }
            start += run.max(1);
        }
        None
    }

    fn find_in(&self, words: &[String], applies: &impl Fn(&str) -> bool) -> Option<Match<'_>> {
        for (at, word) in words.iter().enumerate() {
            let Some(entries) = self.words.get(word) else {
                continue;
            };
            for (rest, list, term) in entries {
                if applies(&self.names[*list])
                    && words.len() > at + rest.len()
                    && words[at + 1..=at + rest.len()] == rest[..]
                {
                    return Some(Match {
                        list: &self.names[*list],
                        term,
                    });
                }
            }
        }
        if self.patterns.is_empty() {
            return None;
        }
        let line = words.join(" ");
        if let Some(set) = &self.set {
            if !set.is_match(&line) {
                return None;
            }
            return set
                .matches(&line)
                .iter()
                .map(|i| &self.patterns[i])
                .find(|(_, list, _)| applies(&self.names[*list]))
                .map(|(_, list, term)| Match {
                    list: &self.names[*list],
                    term,
                });
        }
        self.patterns
            .iter()
            .find(|(regex, list, _)| applies(&self.names[*list]) && regex.is_match(&line))
            .map(|(_, list, term)| Match {
                list: &self.names[*list],
                term,
            })
    }
}

/// `text`'s words in the one form terms and prompts are compared in.
pub fn words(text: &str) -> Vec<String> {
    let folded: String = text
        .nfkc()
        .filter(|c| !is_format(*c))
        .collect::<String>()
        .nfd()
        .filter(|c| !is_combining_mark(*c))
        .flat_map(char::to_lowercase)
        .collect();
    folded
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// `words` with each run of two or more one-letter words joined into one (`n u d e` -> `nude`),
/// or None when there is no such run.
fn join_spelled_out(words: &[String]) -> Option<Vec<String>> {
    let single = |w: &String| w.chars().nth(1).is_none();
    let mut out = Vec::with_capacity(words.len());
    let mut joined_any = false;
    let mut i = 0;
    while i < words.len() {
        let run = words[i..].iter().take_while(|w| single(w)).count();
        if run >= 2 {
            out.push(words[i..i + run].concat());
            joined_any = true;
            i += run;
        } else {
            out.push(words[i].clone());
            i += 1;
        }
    }
    joined_any.then_some(out)
}

/// Characters that are not seen: zero-width spaces and joiners, the soft hyphen, word joiners
/// and invisible operators, bidirectional marks, variation selectors, the byte order mark, tags.
fn is_format(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}'
        | '\u{FFA0}' | '\u{1BCA0}'..='\u{1BCA3}' | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E0FFF}')
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn matcher(terms: &[&str]) -> Matcher {
        Matcher::build(&[TermList {
            name: "adult".into(),
            terms: terms.iter().map(|t| t.to_string()).collect(),
        }])
        .unwrap()
    }

    fn hit(m: &Matcher, text: &str) -> Option<String> {
        m.find(text, |_| true).map(|m| m.term.to_string())
    }

    #[test]
    fn evasions_are_seen_through() {
        let m = matcher(&["nsfw", "nude", "blood bath"]);
        for text in [
            "a NSFW cat",
            "a ｎｓｆｗ cat",
            "a ns\u{200B}fw cat",
            "a n\u{00AD}s\u{2060}f\u{FEFF}w cat",
            "a n s f w cat",
            "a n.s.f.w cat",
            "a n-s-f-w cat",
            "a nüde figure",
            "a ＮＵＤＥ figure",
            "a n\u{0301}ude figure",
            "a blood-bath",
            "a BLOOD   bath",
        ] {
            assert!(hit(&m, text).is_some(), "{text:?} passed");
        }
    }

    #[test]
    fn ordinary_words_with_the_same_letters_pass() {
        let m = matcher(&["cunt", "nude", "ass"]);
        for text in [
            "Scunthorpe at dawn",
            "a nudibranch on a reef",
            "a class of bass players",
            "an assassin's creed",
            "a b c",
        ] {
            assert_eq!(hit(&m, text), None, "{text:?} matched");
        }
    }

    #[test]
    fn patterns_match_the_folded_words_in_linear_time() {
        let m = matcher(&[r"re:\bn+u+d+e+s?\b", r"re:(a|aa)+$"]);
        assert_eq!(
            hit(&m, "so nnuuddee").as_deref(),
            Some(r"re:\bn+u+d+e+s?\b")
        );
        assert_eq!(hit(&m, "ｎｕｄｅｓ").as_deref(), Some(r"re:\bn+u+d+e+s?\b"));
        // A pattern that backtracks exponentially elsewhere: here linear.
        let long = format!("{}b", "a".repeat(50_000));
        let started = std::time::Instant::now();
        assert_eq!(hit(&m, &long), None);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    proptest::proptest! {
        #![proptest_config(crate::domain::fuzz_config())]

        /// Any text is matched without a panic, and any term is used or refused by its text.
        #[test]
        fn any_text_and_any_term_are_handled(text in "\\PC{0,400}", term in "\\PC{0,80}") {
            let m = matcher(&["nsfw", "blood bath", r"re:\bn+u+d+e+\b"]);
            let _ = m.find(&text, |_| true);
            let _ = Matcher::build(&[TermList { name: "any".into(), terms: vec![term] }]);
        }

        /// A listed word is found however it is spelled out, and wherever it stands.
        #[test]
        fn a_word_spelled_out_is_found(
            word in "[a-z]{2,12}",
            before in "[a-z ]{0,20}",
            joiner in prop_oneof![Just(" "), Just("."), Just("-"), Just("\u{200B}"), Just(" . ")],
        ) {
            let m = matcher(&[&word]);
            let spelled: Vec<String> = word.chars().map(String::from).collect();
            let text = format!("{before} {} end", spelled.join(joiner));
            proptest::prop_assert!(hit(&m, &text).is_some(), "{text:?}");
            let wide: String = word.chars().map(|c| char::from_u32(c as u32 + 0xFEE0).unwrap()).collect();
            let wide = format!("{before} {wide}");
            proptest::prop_assert!(hit(&m, &wide).is_some(), "{:?}", wide);
        }
    }

    #[test]
    fn lists_apply_by_name_and_bad_terms_are_named() {
        let m = Matcher::build(&[
            TermList {
                name: "adult".into(),
                terms: vec!["nude".into()],
            },
            TermList {
                name: "violence".into(),
                terms: vec!["gore".into()],
            },
        ])
        .unwrap();
        // The first term in the prompt's order, whichever list holds it.
        let found = m.find("gore and nudes and nude", |_| true).unwrap();
        assert_eq!((found.list, found.term), ("violence", "gore"));
        let found = m.find("nudes and nude and gore", |l| l == "adult").unwrap();
        assert_eq!((found.list, found.term), ("adult", "nude"));
        assert_eq!(m.find("gore", |l| l == "adult"), None);
        assert_eq!(
            m.find("gore", |l| l == "violence").unwrap().list,
            "violence"
        );

        let bad = |name: &str, term: &str| {
            Matcher::build(&[TermList {
                name: name.into(),
                terms: vec![term.into()],
            }])
            .unwrap_err()
        };
        assert!(bad("adult", "re:(").contains("is not a pattern"));
        assert!(bad("adult", "re:a{100000}{100000}").contains("is not a pattern"));
        assert!(bad("adult", "?!").contains("has no letters or digits"));
        assert!(bad("adult", &"x".repeat(300)).contains("at most 256 characters"));
        assert!(bad("Adult", "x").contains("a-z, 0-9"));
        assert!(check_list_name(&"a".repeat(65)).is_err());
    }
}
