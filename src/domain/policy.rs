/// A list of blocked words and phrases. A prompt that contains one (as whole words, ignoring case
/// and punctuation) is accepted at submit and then fails with `content policy violation: ...`.
#[derive(Clone, Debug, Default)]
pub struct ContentPolicy {
    /// Shared: the policy is cloned with the server's state for every request.
    terms: std::sync::Arc<[String]>,
}

impl ContentPolicy {
    pub fn new(terms: &[String]) -> ContentPolicy {
        let terms = terms
            .iter()
            .map(|t| normalize(t))
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .into();
        ContentPolicy { terms }
    }

    /// The first blocked term the prompt contains, if any.
    pub fn violation(&self, prompt: &str) -> Option<&str> {
        if self.terms.is_empty() {
            return None;
        }
        let haystack = format!(" {} ", normalize(prompt));
        self.terms
            .iter()
            .find(|t| haystack.contains(&format!(" {t} ")))
            .map(String::as_str)
    }
}

/// Lower-case words separated by single spaces; everything that is not a letter or digit separates.
fn normalize(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_whole_words_and_phrases() {
        let p = ContentPolicy::new(&["gore".into(), "Blood Bath".into()]);
        assert_eq!(p.violation("lots of GORE here"), Some("gore"));
        assert_eq!(p.violation("a blood-bath, really"), Some("blood bath"));
        assert_eq!(p.violation("Gregory's gorey tale"), None);
        assert_eq!(p.violation("bloodbath"), None);
        assert_eq!(ContentPolicy::new(&[]).violation("gore"), None);
    }
}
