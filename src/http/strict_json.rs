//! JSON bodies read strictly: an object with the same key twice is refused, at any depth.
//! serde_json keeps the last of duplicate keys, while other readers (a proxy's or a WAF's
//! check in front of easel) may keep the first: a body with one meaning for everyone who reads
//! it cannot be used to show a checker one prompt and easel another.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why a body was not read.
#[derive(Debug)]
pub enum Unread {
    /// The key (a dotted path from the top, `[i]` for list items) that appears twice.
    Duplicate(String),
    Invalid(serde_json::Error),
}

/// `bytes` as JSON, refusing duplicate keys.
pub fn parse(bytes: &[u8]) -> Result<Value, Unread> {
    let duplicate = RefCell::new(None);
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let read = Strict {
        path: String::new(),
        duplicate: &duplicate,
    }
    .deserialize(&mut reader)
    .and_then(|value| reader.end().map(|()| value));
    match (read, duplicate.into_inner()) {
        (_, Some(path)) => Err(Unread::Duplicate(path)),
        (Ok(value), None) => Ok(value),
        (Err(e), None) => Err(Unread::Invalid(e)),
    }
}

/// A value at `path`; the first duplicate found is left in `duplicate`.
struct Strict<'a> {
    path: String,
    duplicate: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Strict {
            path: format!("{}[{}]", self.path, items.len()),
            duplicate: self.duplicate,
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if object.contains_key(&key) {
                *self.duplicate.borrow_mut() = Some(path);
                return Err(de::Error::custom("duplicate key"));
            }
            let value = map.next_value_seed(Strict {
                path,
                duplicate: self.duplicate,
            })?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn duplicate(body: &str) -> Option<String> {
        match parse(body.as_bytes()) {
            Err(Unread::Duplicate(path)) => Some(path),
            _ => None,
        }
    }

    #[test]
    fn a_key_twice_at_any_depth_is_named_by_its_path() {
        assert_eq!(
            duplicate(r#"{"prompt": "a nsfw cat", "prompt": "a cat"}"#).as_deref(),
            Some("prompt")
        );
        assert_eq!(
            duplicate(r#"{"metadata": {"a": 1, "b": {"c": 1, "c": 2}}}"#).as_deref(),
            Some("metadata.b.c")
        );
        assert_eq!(
            duplicate(r#"{"urls": [{"u": 1}, {"u": 1, "u": 2}]}"#).as_deref(),
            Some("urls[1].u")
        );
        // Escapes name the same key as its plain spelling.
        assert_eq!(
            duplicate(r#"{"prompt": "a", "pr\u006fmpt": "b"}"#).as_deref(),
            Some("prompt")
        );
    }

    proptest! {
        #![proptest_config(crate::domain::fuzz_config())]

        /// Any JSON without duplicate keys reads as serde_json reads it; any bytes are read or
        /// refused without a panic.
        #[test]
        fn any_body_is_read_or_refused(value in crate::domain::any_json(), bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let text = serde_json::to_vec(&value).unwrap();
            let read = parse(&text).unwrap();
            prop_assert_eq!(read, serde_json::from_slice::<Value>(&text).unwrap());
            let _ = parse(&bytes);
        }
    }

    #[test]
    fn other_bodies_read_as_serde_json_reads_them() {
        for body in [
            r#"{"prompt": "a cat", "metadata": {"n": 1.5, "big": 18446744073709551615, "neg": -3}}"#,
            r#"[1, "two", null, true, {"a": {}}]"#,
            r#"{"same": 1, "nested": {"same": 2}}"#,
        ] {
            let strict = parse(body.as_bytes()).unwrap();
            let plain: Value = serde_json::from_str(body).unwrap();
            assert_eq!(strict, plain, "{body}");
        }
        for bad in ["", "{", r#"{"a": 1} x"#, r#"{"a": }"#] {
            assert!(
                matches!(parse(bad.as_bytes()), Err(Unread::Invalid(_))),
                "{bad}"
            );
        }
    }
}
