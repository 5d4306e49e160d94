//! The configuration's `blocked_terms`: a prompt holding one is accepted and then fails with
//! `content policy violation: ...`, as the seed's example shows. Matched as the moderation
//! lists are ([`super::moderation`]): through case, compatibility forms, accents, invisible
//! characters and spelled-out letters, whole words only.

use std::sync::Arc;

use super::moderation::{Matcher, TermList};

#[derive(Clone, Debug, Default)]
pub struct ContentPolicy {
    /// Shared: the policy is cloned with the server's state for every request.
    terms: Arc<Matcher>,
}

impl ContentPolicy {
    /// The policy of `terms`; one that cannot be matched (no letters or digits, too long, a
    /// `re:` pattern that does not compile) is the error.
    pub fn new(terms: &[String]) -> Result<ContentPolicy, String> {
        let list = TermList {
            name: "blocked_terms".into(),
            terms: terms.to_vec(),
        };
        let terms = Matcher::build(&[list]).map_err(|e| format!("blocked_terms: {e}"))?;
        Ok(ContentPolicy {
            terms: Arc::new(terms),
        })
    }

    /// The first blocked term the prompt contains, if any, as configured.
    pub fn violation(&self, prompt: &str) -> Option<&str> {
        self.terms.find(prompt, |_| true).map(|m| m.term)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_whole_words_and_phrases_however_spelled() {
        let p = ContentPolicy::new(&["gore".into(), "Blood Bath".into()]).unwrap();
        assert_eq!(p.violation("lots of GORE here"), Some("gore"));
        assert_eq!(p.violation("lots of ｇｏｒｅ here"), Some("gore"));
        assert_eq!(p.violation("a blood-bath, really"), Some("Blood Bath"));
        assert_eq!(p.violation("Gregory's gorey tale"), None);
        assert_eq!(p.violation("bloodbath"), None);
        assert_eq!(ContentPolicy::new(&[]).unwrap().violation("gore"), None);
        assert!(ContentPolicy::new(&["?!".into()]).is_err());
    }
}
