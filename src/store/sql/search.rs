//! A page of a search of the account's prompts (`GET /api/v1/tasks?q=`, the gallery): the
//! tasks whose prompt holds every word, newest first, from the cursor down. Each store reads
//! its own full-text index its own way.
//!
//! - SQLite: one statement, once the index holds every task stored so far (it is filled behind
//!   the writer, `sqlite::search_index`). The FTS5 table (migration 0024) holds each task's
//!   prompt and its account's `owner` token, and the match ANDs the account's token with the words, so FTS5
//!   reads only the account's entries of the words, gives their rowids (`seq`) newest first
//!   (no sort), and the read stops at the page's end.
//! - PostgreSQL: a GIN index cannot give its entries in order, and the planner chooses between
//!   walking the account's tasks newest first (right for common words) and the GIN index then a
//!   sort (right for rare ones) from estimates that do not know which account holds a word: in
//!   `bench/run --only search` it walked all 500,000 of an account's tasks for a word only
//!   another account used. So the choice is made from what is found: first the account's
//!   newest [`WINDOW`] tasks from the cursor down, tested one by one (bounded); if they hold a
//!   full page, that is the page (they are the newest). Otherwise the GIN index, forced by a
//!   materialized CTE, gives every match of the words and the account's own lexeme (written by
//!   easel with each task, [`search_lexemes`]; migration 0019), and those are sorted.

use super::{sql, Arg, Sql, SqlStore};
use crate::store::rows::{TaskRow, TASK_COLUMNS, TASK_JOINS};
use crate::store::{StoreResult, TaskFilter};

/// The account's newest tasks that PostgreSQL tests one by one before it reads the GIN index:
/// a few ms of reading, which finds a page of any words in more than about one task in 250
/// without the index (docs/benchmarks.md, "Search").
pub(crate) const WINDOW: i64 = 5000;

/// The model in a task's settings (`Extras`' JSON, kept as text by both stores; on SQLite in
/// `task_extras`, which [`TASK_JOINS`] joins as `x`).
pub(crate) const MODEL: Sql = Sql::each(
    "json_extract(x.extras, '$.settings.model')",
    "(t.extras::jsonb #>> '{settings,model}')",
);

const FTS: Sql = sql!(
    "SELECT ",
    TASK_COLUMNS,
    " FROM tasks_search s CROSS JOIN tasks t ON t.seq = s.rowid",
    TASK_JOINS,
    " WHERE tasks_search MATCH $4 AND s.rowid < $2 AND t.account_id = $1"
);
const FTS_MODEL: Sql = sql!(" AND ", MODEL, " = $5");
const FTS_ORDER: Sql = sql!(" ORDER BY s.rowid DESC LIMIT $3");

/// Each task of the window read by its `seq` (a lateral subquery the planner may not flatten,
/// `OFFSET 0`): as a plain join, with a status or type filter written in, the planner read every
/// task of the filter's index to hash-join them with the window.
const RECENT: Sql = sql!(
    "SELECT ",
    TASK_COLUMNS,
    " FROM (SELECT seq FROM tasks WHERE account_id = $1 AND seq < $2
            ORDER BY seq DESC LIMIT $5) w
     CROSS JOIN LATERAL (SELECT * FROM tasks WHERE seq = w.seq OFFSET 0) t",
    TASK_JOINS,
    " WHERE t.search @@ $4::tsquery"
);
const RECENT_MODEL: Sql = sql!(" AND ", MODEL, " = $6");
const MATCHES: Sql = sql!(
    "WITH m AS MATERIALIZED (
         SELECT t.seq FROM tasks t
         WHERE t.search @@ ($4::tsquery && $5::tsquery)
           AND t.seq < $2 AND t.account_id = $1"
);
const MATCHES_MODEL: Sql = sql!(" AND ", MODEL, " = $6");
/// The page's rows, taken from the matches once they are sorted and cut, so that `tasks` is read
/// by `seq` for those alone (left to itself the planner merged the matches with a walk down
/// the primary key).
const MATCHES_ROWS: Sql = sql!(
    ") SELECT ",
    TASK_COLUMNS,
    " FROM (SELECT seq FROM m ORDER BY seq DESC LIMIT $3) top
     JOIN tasks t ON t.seq = top.seq",
    TASK_JOINS,
    " ORDER BY t.seq DESC"
);
/// In the window's own order, so that the read stops once the page is full (ordered by `t.seq`
/// the planner did not see it was the same order, and read and sorted the whole window).
const NEWEST: Sql = sql!(" ORDER BY w.seq DESC LIMIT $3");

/// A text quoted for FTS5's query syntax and PostgreSQL's `tsquery` input alike.
fn quoted(text: &str, quote: char) -> String {
    let doubled = format!("{quote}{quote}");
    format!("{quote}{}{quote}", text.replace(quote, &doubled))
}

/// A task's lexemes for PostgreSQL's `search` column (migration 0019), space-separated: the
/// words of its prompt cut as a search's words are ([`TaskFilter::words_of`]), so that what is
/// indexed and what is asked always match, less words longer than a search can be (PostgreSQL
/// refuses a lexeme over 2,047 bytes), and the account's own lexeme. Made by easel rather
/// than by PostgreSQL's parser: the database is what every node shares, and tokenizing there
/// cost a submit on it more than the index itself (docs/benchmarks.md, "Search").
pub(crate) fn search_lexemes(prompt: &str, account_id: &str) -> String {
    let mut lexemes = String::with_capacity(prompt.len() + account_id.len() + 2);
    for word in TaskFilter::words_of(prompt) {
        if word.chars().count() <= TaskFilter::SEARCH_MAX_CHARS {
            lexemes.push_str(&word);
            lexemes.push(' ');
        }
    }
    lexemes.push('~');
    lexemes.push_str(account_id);
    lexemes
}

/// The words as a `tsquery` of lexemes, ANDed, read as they are (no parser between: the index
/// holds them as [`search_lexemes`] cut them).
fn words_query(words: &[String]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| quoted(w, '\'')).collect();
    quoted.join(" & ")
}

/// SQLite's match: the account's `owner` token and each word in the `prompt` column, ANDed.
/// The words hold letters and digits alone ([`TaskFilter::words_of`]); quotes are doubled all
/// the same.
fn fts_match(account_id: &str, words: &[String]) -> String {
    let mut terms = format!("owner:{}", quoted(&account_id.replace('-', ""), '"'));
    for word in words {
        terms.push_str(" prompt:");
        terms.push_str(&quoted(word, '"'));
    }
    terms
}

/// The account's own lexeme in PostgreSQL's `search` column, as a `tsquery` ([`search_lexemes`]
/// writes it `~` and the account's id; no word of a prompt holds `~`).
fn owner_lexeme(account_id: &str) -> String {
    quoted(&format!("~{}", account_id.replace('\\', "\\\\")), '\'')
}

/// A page's statement: `head`, the conditions of `filter`, its model's (`model_clause`, the
/// model bound next in `args`) and `tail`.
pub(crate) fn filtered<'a>(
    head: &str,
    filter: &'a TaskFilter,
    model_clause: &str,
    tail: &str,
    args: &mut Vec<Arg<'a>>,
) -> String {
    let mut sql = String::from(head);
    sql.push_str(&filter.conditions());
    if let Some(model) = &filter.model {
        sql.push_str(model_clause);
        args.push(model.as_str().into());
    }
    sql.push_str(tail);
    sql
}

/// The rows of a search's page: at most `limit` + 1 tasks of `filter` (whose `words` are not
/// empty) below `before`, newest first.
pub(crate) async fn search_rows<S: SqlStore>(
    store: &S,
    account_id: &str,
    filter: &TaskFilter,
    before: i64,
    limit: i64,
) -> StoreResult<Vec<TaskRow>> {
    let db = store.reader();
    if db.is_sqlite() {
        // A store that cannot write now (a full disk) still answers from what is indexed.
        if let Err(e) = store.search_caught_up().await {
            tracing::warn!(error = %e, "searching without the newest tasks: the index cannot be caught up");
        }
        let terms = fts_match(account_id, &filter.words);
        let mut args: Vec<Arg> = vec![account_id.into(), before.into(), limit.into()];
        args.push(terms.as_str().into());
        let sql = filtered(
            FTS.sqlite,
            filter,
            FTS_MODEL.sqlite,
            FTS_ORDER.sqlite,
            &mut args,
        );
        return db.all(sql.as_str(), &args).await;
    }
    let words = words_query(&filter.words);
    let owner = owner_lexeme(account_id);
    let mut args: Vec<Arg> = vec![account_id.into(), before.into(), limit.into()];
    args.push(words.as_str().into());
    args.push(WINDOW.into());
    let sql = filtered(
        RECENT.postgres,
        filter,
        RECENT_MODEL.postgres,
        NEWEST.postgres,
        &mut args,
    );
    let recent: Vec<TaskRow> = db.all_planned_each_time(sql.as_str(), &args).await?;
    if recent.len() as i64 >= limit {
        return Ok(recent);
    }
    args[4] = owner.as_str().into();
    let mut sql = String::from(MATCHES.postgres);
    sql.push_str(&filter.conditions());
    if filter.model.is_some() {
        sql.push_str(MATCHES_MODEL.postgres);
    }
    sql.push_str(MATCHES_ROWS.postgres);
    db.all_planned_each_time(sql.as_str(), &args).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_store_is_sent_the_account_and_the_words_quoted() {
        let words = TaskFilter::words_of("Red fox");
        assert_eq!(
            fts_match("77ca-ef\"fa", &words),
            r#"owner:"77caef""fa" prompt:"red" prompt:"fox""#
        );
        assert_eq!(owner_lexeme("77ca-ef'a"), "'~77ca-ef''a'");
        assert_eq!(words_query(&words), "'red' & 'fox'");
    }

    #[test]
    fn a_prompt_is_indexed_as_a_search_cuts_its_words_and_overlong_words_are_left_out() {
        let long = "w".repeat(TaskFilter::SEARCH_MAX_CHARS + 1);
        let prompt = format!("A Red-fox, e-mail x@y.com; café --ar 16:9 red {long} ");
        assert_eq!(
            search_lexemes(&prompt, "9f1c-77"),
            "a red fox e mail x y com café ar 16 9 ~9f1c-77"
        );
        assert_eq!(search_lexemes("", "acct"), "~acct");
        // Every word a search asks for is one the index holds, cut the same way.
        let asked = TaskFilter::words_of("RED fox Café 16");
        let held = search_lexemes(&prompt, "9f1c-77");
        assert!(asked.iter().all(|w| held.split(' ').any(|h| h == w)));
    }
}
