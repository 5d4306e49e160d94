use std::fmt;
use std::str::FromStr;

use super::names::named_enum;

named_enum! {
    /// Where a task is in its life. `pending -> starting -> processing -> finished | failed`; a
    /// task whose worker is lost goes back to `pending` (or to `failed` once it has used all
    /// attempts); a task that has not ended may be `canceled` by its caller at any point.
    pub enum TaskStatus(serialize_all = "lowercase", parse_err_fn = unknown_status) {
        Pending,
        Starting,
        Processing,
        Finished,
        Failed,
        Canceled,
    }
}

fn unknown_status(s: &str) -> String {
    format!("unknown task status `{s}`")
}

impl TaskStatus {
    /// `finished`, `failed` and `canceled` are final: nothing moves a task out of them.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskStatus::Finished | TaskStatus::Failed | TaskStatus::Canceled
        )
    }

    /// Whether the state machine allows going from `self` to `next`.
    pub fn can_become(self, next: TaskStatus) -> bool {
        use TaskStatus::*;
        matches!(
            (self, next),
            (Pending, Starting)
                | (Starting, Processing)
                | (Starting, Failed)
                | (Processing, Finished)
                | (Processing, Failed)
                | (Starting, Pending)
                | (Processing, Pending)
                | (Pending, Canceled)
                | (Starting, Canceled)
                | (Processing, Canceled)
        )
    }
}

named_enum! {
    /// Queue class. Turbo is served before fast before relax; first come first served within one.
    #[derive(PartialOrd, Ord)]
    pub enum ProcessMode(serialize_all = "lowercase", parse_err_fn = unknown_mode) {
        Turbo,
        Fast,
        Relax,
    }
}

fn unknown_mode(_: &str) -> String {
    "must be one of \"relax\", \"fast\", \"turbo\"".into()
}

impl ProcessMode {
    /// Lower is served first.
    pub fn priority(self) -> i64 {
        match self {
            ProcessMode::Turbo => 0,
            ProcessMode::Fast => 1,
            ProcessMode::Relax => 2,
        }
    }
}

/// The maximum prompt length, in characters after trimming.
pub const PROMPT_MAX_CHARS: usize = 4000;

/// Refuses the characters a prompt may not hold: control characters but newline and tab, and
/// the bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069).
/// Those reorder how text is shown without changing what it says, so a prompt holding one reads
/// one way in the dashboard, a log or a moderator's screen and another way to the model
/// ("Trojan Source"). Right-to-left scripts need none of them (the bidirectional algorithm
/// orders them by itself), and the marks U+200E, U+200F and U+061C, which do not reorder text
/// beyond them, are kept.
pub fn check_text(text: &str) -> Result<(), String> {
    match text
        .chars()
        .find(|c| (c.is_control() && *c != '\n' && *c != '\t') || is_bidi_control(*c))
    {
        Some(c) if c.is_control() => Err(format!(
            "must not contain control characters (found U+{:04X})",
            c as u32
        )),
        Some(c) => Err(format!(
            "must not contain bidirectional embedding, override or isolate characters \
             (found U+{:04X})",
            c as u32
        )),
        None => Ok(()),
    }
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A prompt: trimmed, 1..=4000 characters, no control characters but newline and tab, none of
/// the bidirectional controls ([`check_text`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompt(String);

impl Prompt {
    pub fn parse(raw: &str) -> Result<Prompt, String> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err("must not be empty".into());
        }
        let chars = trimmed.chars().count();
        if chars > PROMPT_MAX_CHARS {
            return Err(format!(
                "must be at most {PROMPT_MAX_CHARS} characters (got {chars})"
            ));
        }
        check_text(trimmed)?;
        Ok(Prompt(trimmed.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `W:H`, positive integers, with a ratio between 1:4 and 4:1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AspectRatio {
    pub width: u32,
    pub height: u32,
}

impl AspectRatio {
    pub const SQUARE: AspectRatio = AspectRatio {
        width: 1,
        height: 1,
    };
}

impl FromStr for AspectRatio {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        const SHAPE: &str = "must look like \"W:H\" with positive integers, e.g. \"16:9\"";
        let (w, h) = s.split_once(':').ok_or(SHAPE)?;
        let parse = |t: &str| -> Result<u32, String> {
            if t.is_empty() || t.len() > 5 || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(SHAPE.to_string());
            }
            match t.parse::<u32>() {
                Ok(0) | Err(_) => Err(SHAPE.to_string()),
                Ok(n) => Ok(n),
            }
        };
        let (width, height) = (parse(w)?, parse(h)?);
        // Compare as integers: width/height within [1/4, 4].
        if u64::from(width) > 4 * u64::from(height) || u64::from(height) > 4 * u64::from(width) {
            return Err("ratio must be between 1:4 and 4:1".into());
        }
        Ok(AspectRatio { width, height })
    }
}

impl fmt::Display for AspectRatio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.width, self.height)
    }
}

#[cfg(test)]
mod tests {
    use super::super::names::assert_names;
    use super::*;

    #[test]
    fn transitions_follow_the_state_machine() {
        use TaskStatus::*;
        assert!(Pending.can_become(Starting));
        assert!(Starting.can_become(Processing));
        assert!(Processing.can_become(Finished));
        assert!(Processing.can_become(Failed));
        assert!(!Pending.can_become(Finished));
        assert!(!Finished.can_become(Pending));
        assert!(!Failed.can_become(Processing));
        for &s in TaskStatus::ALL {
            assert_eq!(s.as_str().parse::<TaskStatus>().unwrap(), s);
            if s.is_final() {
                assert!(TaskStatus::ALL.iter().all(|n| !s.can_become(*n)));
            }
        }
    }

    #[test]
    fn prompt_rules() {
        assert_eq!(Prompt::parse("  a cat  ").unwrap().as_str(), "a cat");
        assert!(Prompt::parse("   ").is_err());
        assert!(Prompt::parse("").is_err());
        assert!(Prompt::parse("line\nbreak\tand tab").is_ok());
        assert!(Prompt::parse("bell\u{7}").is_err());
        assert!(Prompt::parse(&"é".repeat(4000)).is_ok());
        assert!(Prompt::parse(&"é".repeat(4001)).is_err());
    }

    #[test]
    fn aspect_ratio_rules() {
        assert_eq!(
            "16:9".parse::<AspectRatio>().unwrap(),
            AspectRatio {
                width: 16,
                height: 9
            }
        );
        assert!("1:4".parse::<AspectRatio>().is_ok());
        assert!("4:1".parse::<AspectRatio>().is_ok());
        for bad in [
            "1:5", "5:1", "0:1", "1:0", "-1:1", "1", "a:b", "1:1:1", "", " 1:1", "+1:1", "1.5:1",
            "999999:1",
        ] {
            assert!(bad.parse::<AspectRatio>().is_err(), "{bad}");
        }
    }

    #[test]
    fn process_modes_order_the_queue() {
        assert!(ProcessMode::Turbo.priority() < ProcessMode::Fast.priority());
        assert!(ProcessMode::Fast.priority() < ProcessMode::Relax.priority());
        assert!("slow".parse::<ProcessMode>().is_err());
    }

    #[test]
    fn names_are_the_api_contract() {
        let statuses = "pending starting processing finished failed canceled";
        assert_names::<TaskStatus>(statuses, "done", "unknown task status `done`");
        let one_of = "must be one of \"relax\", \"fast\", \"turbo\"";
        assert_names::<ProcessMode>("turbo fast relax", "Fast", one_of);
    }
}
