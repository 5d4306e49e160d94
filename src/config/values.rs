//! How setting values are written: durations, lists, and the named choices. Shared by every
//! section so that `10s`, `10s,30s` and `local` read the same wherever a setting takes them.

/// A setting that takes one of a few names (`blob_store = "s3"`). The enum (de)serializes as its
/// name, and a name that is not one of them is refused listing the ones that are.
macro_rules! choice {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($setting:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every choice, in the order the documentation lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The name the setting gives this choice.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(text: &str) -> Result<Self, String> {
                match text.trim() {
                    $( $text => Ok($name::$variant), )+
                    other => Err(format!(
                        "{} must be {}, not `{other}`",
                        $setting,
                        $crate::config::values::one_of(&[$($text),+]),
                    )),
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use choice;

/// `` `a` ``, `` `a` or `b` ``, `` `a`, `b` or `c` ``: the names a choice accepts, for its error.
pub fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// A size-like setting as written: plain digits (a number of bytes, as a TOML number) or text,
/// which the setting parses itself.
pub fn bytes_or_text<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Result<u64, String>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Bytes(u64),
        Text(String),
    }
    Ok(match <Raw as serde::Deserialize>::deserialize(d)? {
        Raw::Bytes(bytes) => Ok(bytes),
        Raw::Text(text) => Err(text),
    })
}

/// A size in bytes: `512MiB`, `1GiB`, `2GB`, `1.5gib`, `1048576` (plain digits are bytes). Units:
/// B, KB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (powers of 1024), in any case; a
/// space may come before the unit. The error says only that the text is not a size: the
/// setting adds its name and what else it takes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let bad = || format!("`{text}` is not a size (like 512MiB, 1GiB, 2GB or a number of bytes)");
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1000,
        "mb" | "m" => 1000_u64.pow(2),
        "gb" | "g" => 1000_u64.pow(3),
        "tb" | "t" => 1000_u64.pow(4),
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    let bytes = number * scale as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// Durations as human-readable strings (`10s`, `1m 30s`, `250ms`), or plain integers as seconds.
pub mod duration {
    use serde::{de, Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Secs(s) => Ok(Duration::from_secs(s)),
            Raw::Text(t) => parse(&t).map_err(de::Error::custom),
        }
    }

    pub fn parse(text: &str) -> Result<Duration, String> {
        humantime::parse_duration(text.trim())
            .map_err(|e| format!("`{text}` is not a duration like 10s: {e}"))
    }
}

/// A list of durations: a TOML array, or a comma-separated string (`10s,30s,90s`).
pub mod duration_list {
    use serde::{de, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &[Duration], s: S) -> Result<S::Ok, S::Error> {
        let text: Vec<String> = d
            .iter()
            .map(|d| humantime::format_duration(*d).to_string())
            .collect();
        s.serialize_str(&text.join(","))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
        crate::config::values::string_list::deserialize(d)?
            .iter()
            .map(|t| crate::config::values::duration::parse(t).map_err(de::Error::custom))
            .collect()
    }
}

/// A list of strings: an array, or one comma-separated string. Empty items are dropped.
pub mod string_list {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            List(Vec<String>),
            Text(String),
        }
        let items = match Raw::deserialize(d)? {
            Raw::List(list) => list,
            Raw::Text(text) => text.split(',').map(str::to_string).collect(),
        };
        Ok(items
            .into_iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect())
    }
}

/// A list of named choices, written as [`string_list`] is; each item is parsed with `FromStr`,
/// so a wrong one is refused by its name.
pub mod choice_list {
    use serde::{de, Deserializer, Serialize, Serializer};
    use std::fmt::Display;
    use std::str::FromStr;

    pub fn serialize<T: Serialize, S: Serializer>(items: &[T], s: S) -> Result<S::Ok, S::Error> {
        items.serialize(s)
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<Vec<T>, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        crate::config::values::string_list::deserialize(d)?
            .iter()
            .map(|t| t.parse().map_err(de::Error::custom))
            .collect()
    }
}

/// A URL setting: when given, it must parse and be `http` or `https`.
pub fn check_http_url(name: &str, url: Option<&str>) -> anyhow::Result<()> {
    if let Some(url) = url {
        let parsed =
            url::Url::parse(url).map_err(|e| anyhow::anyhow!("configuration: {name}: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            anyhow::bail!("configuration: {name} must be an http or https URL");
        }
    }
    Ok(())
}

/// `url` with any password replaced by `***`, for logs and errors.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_never_reach_logs() {
        assert_eq!(
            redact("postgres://easel:hunter2@db:5432/easel"),
            "postgres://easel:***@db:5432/easel"
        );
        assert_eq!(redact("postgres://db/easel"), "postgres://db/easel");
    }
}
