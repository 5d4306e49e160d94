//! Midjourney's permutation prompts: `a {red, blue} bird` is two prompts, `a red bird` and `a
//! blue bird`; groups nest (`a {big {red, blue}, small} bird` is three) and several groups give
//! every combination, in order. `\{`, `\}` and `\,` are a brace or comma of the text.

/// A prompt's permutations, in order: the prompt itself (unchanged) when it has no group, else
/// each combination (escapes resolved). Refused, with the rule, when a brace is unbalanced or
/// the combinations would be more than `max`.
pub fn expand(prompt: &str, max: usize) -> Result<Vec<String>, String> {
    let chars: Vec<char> = prompt.chars().collect();
    let has_group = chars
        .iter()
        .enumerate()
        .any(|(i, c)| *c == '{' && !escaped(&chars, i));
    if !has_group {
        return Ok(vec![prompt.to_string()]);
    }
    let mut reader = Reader {
        chars: &chars,
        at: 0,
        max,
    };
    let all = reader.sequence(false)?;
    if reader.at < chars.len() {
        return Err("has a } without a { before it (write \\} for a brace)".into());
    }
    Ok(all)
}

/// Whether the character at `i` follows an odd number of backslashes.
fn escaped(chars: &[char], i: usize) -> bool {
    chars[..i].iter().rev().take_while(|c| **c == '\\').count() % 2 == 1
}

struct Reader<'c> {
    chars: &'c [char],
    at: usize,
    max: usize,
}

impl Reader<'_> {
    fn too_many(&self, n: usize) -> String {
        format!(
            "has {{...}} permutations that make more than {} prompts (at least {n})",
            self.max
        )
    }

    /// Text and groups up to the end, or (inside a group) up to its `,` or `}`: every
    /// combination of them.
    fn sequence(&mut self, inside: bool) -> Result<Vec<String>, String> {
        let mut all = vec![String::new()];
        while let Some(&c) = self.chars.get(self.at) {
            match c {
                '\\' if matches!(self.chars.get(self.at + 1), Some('{' | '}' | ',' | '\\')) => {
                    let next = self.chars[self.at + 1];
                    all.iter_mut().for_each(|s| s.push(next));
                    self.at += 2;
                }
                '{' => {
                    self.at += 1;
                    let options = self.group()?;
                    let n = all.len() * options.len();
                    if n > self.max {
                        return Err(self.too_many(n));
                    }
                    let mut next = Vec::with_capacity(n);
                    for head in &all {
                        for option in &options {
                            next.push(format!("{head}{option}"));
                        }
                    }
                    all = next;
                }
                ',' | '}' if inside => break,
                '}' => break,
                c => {
                    all.iter_mut().for_each(|s| s.push(c));
                    self.at += 1;
                }
            }
        }
        Ok(all)
    }

    /// A group's options after its `{`, through its `}`: each option's combinations, trimmed.
    fn group(&mut self) -> Result<Vec<String>, String> {
        let mut options = Vec::new();
        loop {
            let option = self.sequence(true)?;
            options.extend(option.into_iter().map(|s| s.trim().to_string()));
            if options.len() > self.max {
                return Err(self.too_many(options.len()));
            }
            match self.chars.get(self.at) {
                Some(',') => self.at += 1,
                Some('}') => {
                    self.at += 1;
                    return Ok(options);
                }
                _ => return Err("has a { without its } (write \\{ for a brace)".into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(prompt: &str) -> Vec<String> {
        expand(prompt, 40).unwrap_or_else(|e| panic!("{prompt}: {e}"))
    }

    #[test]
    fn groups_expand_in_order_nested_and_combined() {
        assert_eq!(all("a {red, blue} bird"), ["a red bird", "a blue bird"]);
        assert_eq!(
            all("a {big {red, blue}, small} bird"),
            ["a big red bird", "a big blue bird", "a small bird"]
        );
        assert_eq!(
            all("{a, b} and {c, d} --ar {1:1, 2:1}").len(),
            8,
            "every combination, parameters included"
        );
        assert_eq!(all("{a, b} {c, d}"), ["a c", "a d", "b c", "b d"]);
        assert_eq!(all("a {red} bird"), ["a red bird"]);
    }

    #[test]
    fn a_prompt_without_groups_is_unchanged_and_escapes_stay_text() {
        assert_eq!(all("a \\{red\\} bird"), ["a \\{red\\} bird"]);
        assert_eq!(all("a bird, flying"), ["a bird, flying"]);
        assert_eq!(
            all("{a \\{x\\, y\\}, b}"),
            ["a {x, y}", "b"],
            "escaped inside a group: the characters"
        );
    }

    #[test]
    fn unbalanced_braces_and_too_many_prompts_are_refused() {
        for (prompt, rule) in [
            ("a {red, blue bird", "has a { without its }"),
            ("a {red} blue} bird", "has a } without a { before it"),
            (
                "{a,b,c}{a,b,c}{a,b,c}{a,b}",
                "make more than 40 prompts (at least 54)",
            ),
        ] {
            let e = expand(prompt, 40).unwrap_err();
            assert!(e.contains(rule), "{prompt}: {e}");
        }
        assert_eq!(expand("{a,b}{c,d}", 4).unwrap().len(), 4);
        assert!(expand("{a,b}{c,d,e}", 4).is_err());
        // Huge products stop early instead of growing.
        let wide = "{a,b}".repeat(64);
        assert!(expand(&wide, 40).is_err());
    }
}
