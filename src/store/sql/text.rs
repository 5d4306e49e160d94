//! A statement's text as each database spells it, made once at compile time ([`sql!`]).
//!
//! Statements are written with PostgreSQL's numbered placeholders, `$1`, `$2`, ... SQLite's
//! spelling numbers them `?1`, `?2`, ...: rusqlite binds its values by position, and SQLite
//! would number a `$1` by where it first appears in the text rather than by its digits.

/// A statement, or a piece of one, in each database's spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sql {
    pub(crate) sqlite: &'static str,
    pub(crate) postgres: &'static str,
}

impl Sql {
    /// A piece that the two databases write differently. Its placeholders are numbered for
    /// SQLite only once it is part of a statement made by [`sql!`].
    pub(crate) const fn each(sqlite: &'static str, postgres: &'static str) -> Sql {
        Sql { sqlite, postgres }
    }

    /// A piece both databases write alike.
    pub(crate) const fn both(text: &'static str) -> Sql {
        Sql::each(text, text)
    }

    /// The text for SQLite or for PostgreSQL.
    pub(crate) const fn on(&self, sqlite: bool) -> &'static str {
        if sqlite {
            self.sqlite
        } else {
            self.postgres
        }
    }
}

/// The length of `parts` joined, in one database's spelling.
pub(crate) const fn joined_len(parts: &[Sql], sqlite: bool) -> usize {
    let mut len = 0;
    let mut i = 0;
    while i < parts.len() {
        len += parts[i].on(sqlite).len();
        i += 1;
    }
    len
}

/// `parts` joined in one database's spelling: for SQLite, each `$` before a digit becomes `?`.
pub(crate) const fn joined<const N: usize>(parts: &[Sql], sqlite: bool) -> [u8; N] {
    let mut out = [0u8; N];
    let mut at = 0;
    let mut i = 0;
    while i < parts.len() {
        let text = parts[i].on(sqlite).as_bytes();
        let mut j = 0;
        while j < text.len() {
            let placeholder =
                sqlite && text[j] == b'$' && j + 1 < text.len() && text[j + 1].is_ascii_digit();
            out[at] = if placeholder { b'?' } else { text[j] };
            at += 1;
            j += 1;
        }
        i += 1;
    }
    assert!(at == N, "the parts are as long as counted");
    out
}

/// Joined bytes back as text (they were joined from text, swapping one ASCII byte for another).
pub(crate) const fn utf8(bytes: &'static [u8]) -> &'static str {
    match core::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(_) => panic!("SQL text is UTF-8"),
    }
}

/// A [`Sql`] made at compile time from its parts, written with `$N` placeholders: string
/// literals, which both databases read alike, and the names of [`Sql`] pieces that differ; or
/// `sqlite: "...", postgres: "..."` for a statement each database writes its own way.
macro_rules! sql {
    (@part $text:literal) => {
        $crate::store::sql::Sql::both($text)
    };
    (@part $piece:ident) => {
        $piece
    };
    (@join $($part:expr),+) => {{
        use $crate::store::sql::{joined, joined_len, utf8, Sql};
        const PARTS: &[Sql] = &[$($part),+];
        const SQLITE: [u8; joined_len(PARTS, true)] = joined(PARTS, true);
        const POSTGRES: [u8; joined_len(PARTS, false)] = joined(PARTS, false);
        const SQL: Sql = Sql::each(utf8(&SQLITE), utf8(&POSTGRES));
        SQL
    }};
    (sqlite: $sqlite:literal, postgres: $postgres:literal $(,)?) => {
        $crate::store::sql::sql!(@join $crate::store::sql::Sql::each($sqlite, $postgres))
    };
    ($($part:tt),+ $(,)?) => {
        $crate::store::sql::sql!(@join $($crate::store::sql::sql!(@part $part)),+)
    };
}
pub(crate) use sql;

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMN: Sql = Sql::each("rowid", "created_seq");

    #[test]
    fn placeholders_are_numbered_for_sqlite_and_pieces_spelled_for_each_database() {
        const STATEMENT: Sql = sql!(
            "SELECT a.",
            COLUMN,
            " FROM accounts a WHERE a.id = $12 AND a.email = $2",
            " AND json_extract(a.x, '$.y') = $1"
        );
        assert_eq!(
            STATEMENT.sqlite,
            "SELECT a.rowid FROM accounts a WHERE a.id = ?12 AND a.email = ?2 \
             AND json_extract(a.x, '$.y') = ?1"
        );
        assert_eq!(
            STATEMENT.postgres,
            "SELECT a.created_seq FROM accounts a WHERE a.id = $12 AND a.email = $2 \
             AND json_extract(a.x, '$.y') = $1"
        );
        let own = sql!(sqlite: "DELETE FROM t WHERE id = $1", postgres: "DELETE FROM u");
        assert_eq!(
            own,
            Sql::each("DELETE FROM t WHERE id = ?1", "DELETE FROM u")
        );
    }
}
