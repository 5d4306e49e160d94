//! A request's query string, read by the rules every route of the contract shares: names the
//! route does not know are ignored, a known name given twice is refused, and a page's `limit`
//! is a whole number within the route's range.

use super::ApiError;

/// The query's `name=value` pairs (decoded), in order, only the `known` names, each at most once.
pub fn pairs(raw: Option<&str>, known: &[&str]) -> Result<Vec<(String, String)>, ApiError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (name, value) in url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        if !known.contains(&name.as_ref()) {
            continue;
        }
        if pairs.iter().any(|(n, _)| *n == name) {
            return Err(ApiError::field(
                &name,
                "invalid_value",
                "must be given once",
            ));
        }
        pairs.push((name.into_owned(), value.into_owned()));
    }
    Ok(pairs)
}

/// A page's `limit`: a whole number from 1 to `max`.
pub fn limit(value: &str, max: u32) -> Result<u32, ApiError> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            ApiError::field(
                "limit",
                "invalid_value",
                format!("must be an integer from 1 to {max}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(e: ApiError) -> String {
        e.to_string()
    }

    #[test]
    fn known_names_are_kept_in_order_and_others_ignored() {
        let got = pairs(Some("b=2&x=9&a=%20one"), &["a", "b"]).unwrap();
        assert_eq!(
            got,
            vec![("b".into(), "2".into()), ("a".into(), " one".into())]
        );
        assert!(pairs(None, &["a"]).unwrap().is_empty());
    }

    #[test]
    fn a_known_name_twice_is_refused_and_an_unknown_one_twice_is_not() {
        let e = pairs(Some("a=1&a=2"), &["a"]).unwrap_err();
        assert_eq!(message(e), "a: must be given once");
        assert_eq!(pairs(Some("x=1&x=2&a=3"), &["a"]).unwrap().len(), 1);
    }

    #[test]
    fn a_limit_is_a_whole_number_within_the_range() {
        assert_eq!(limit("1", 200).unwrap(), 1);
        assert_eq!(limit("200", 200).unwrap(), 200);
        for bad in ["0", "201", "-1", "1.5", "", "ten"] {
            let e = limit(bad, 200).unwrap_err();
            assert_eq!(
                message(e),
                "limit: must be an integer from 1 to 200",
                "{bad:?}"
            );
        }
    }
}
