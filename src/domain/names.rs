//! The enums whose variants are names in the API and the database (statuses, modes, operation
//! kinds, their parameters), declared through one macro: each lists its variants and how they
//! are spelled, and shares the conversions every one of them needs.

use std::str::FromStr;

/// Declares a `Copy` enum of names with strum's conversions (`Display`, `FromStr` erring with a
/// `String`, `&'static str`), `ALL` (every variant, in declaration order), `as_str` and
/// [`Named`]. The parenthesised part is the enum's own `#[strum(...)]`: how its names are
/// spelled and the function that words an unknown one. Further derives (serde, ordering) go on
/// as attributes.
macro_rules! named_enum {
    (
        $(#[$attr:meta])*
        $vis:vis enum $name:ident ($($strum:tt)*) {
            $($(#[$variant_attr:meta])* $variant:ident,)+
        }
    ) => {
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash,
            strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray,
        )]
        #[strum($($strum)*, parse_err_ty = String)]
        $(#[$attr])*
        $vis enum $name {
            $($(#[$variant_attr])* $variant,)+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &[$name] = <$name as strum::VariantArray>::VARIANTS;

            /// Its name in the API and the database.
            pub fn as_str(self) -> &'static str {
                self.into()
            }
        }

        impl $crate::domain::Named for $name {}
    };
}

pub(crate) use named_enum;

/// An enum of names ([`named_enum!`]), for code that takes any of them.
pub trait Named:
    strum::VariantArray + Copy + Into<&'static str> + FromStr<Err = String> + 'static
{
    /// Every name, separated by commas: what a refusal lists.
    fn listed() -> String {
        let names: Vec<&str> = Self::VARIANTS.iter().map(|&v| v.into()).collect();
        names.join(", ")
    }
}

/// The error of a name that is none of `T`'s: the names it may be.
pub(crate) fn one_of<T: Named>(_: &str) -> String {
    let names: Vec<String> = T::VARIANTS
        .iter()
        .map(|v| format!("\"{}\"", Into::<&'static str>::into(*v)))
        .collect();
    format!("must be one of {}", names.join(", "))
}

/// Holds a [`named_enum!`] to its contract: `names` (separated by spaces) are its variants'
/// names in order, each parses back and displays as itself, and `unknown` is refused with `error`.
#[cfg(test)]
pub(crate) fn assert_names<T>(names: &str, unknown: &str, error: &str)
where
    T: Named + std::fmt::Display + PartialEq + std::fmt::Debug,
{
    let all: Vec<&'static str> = T::VARIANTS.iter().map(|&v| v.into()).collect();
    assert_eq!(all, names.split(' ').collect::<Vec<_>>());
    for &v in T::VARIANTS {
        let name: &'static str = v.into();
        assert_eq!(v.to_string(), name);
        assert_eq!(name.parse::<T>(), Ok(v));
    }
    assert_eq!(unknown.parse::<T>(), Err(error.to_string()));
}
