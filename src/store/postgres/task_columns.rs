//! A group of submits' tasks as columns, one array per column, bound to the grouped submit's
//! `INSERT ... SELECT FROM UNNEST` (`submit.rs`): one statement whatever the group's size.

use crate::store::sql::search::search_lexemes;
use crate::store::NewTask;

/// The tasks of a group as columns, for one `INSERT ... SELECT FROM UNNEST`.
#[derive(Default)]
pub(super) struct Rows {
    pub seq: Vec<i64>,
    pub account_id: Vec<String>,
    pub task_type: Vec<String>,
    pub priority: Vec<i64>,
    pub prompt: Vec<String>,
    pub aspect_ratio: Vec<String>,
    pub process_mode: Vec<String>,
    pub seed: Vec<i64>,
    pub webhook_url: Vec<Option<String>>,
    pub webhook_secret: Vec<Option<String>>,
    pub params: Vec<Option<String>>,
    pub parent_seq: Vec<Option<i64>>,
    /// Credits charged (0 for an unlimited account).
    pub cost: Vec<i64>,
    pub extras: Vec<Option<String>>,
    pub turn: Vec<i64>,
    /// The key each was submitted with.
    pub key_id: Vec<String>,
    /// Each one's words for the prompts' index (`sql::search::search_lexemes`).
    pub lexemes: Vec<String>,
}

impl Rows {
    pub fn push(
        &mut self,
        seq: i64,
        account: &str,
        key_id: &str,
        task: &NewTask,
        charged: i64,
        turn: i64,
    ) {
        self.seq.push(seq);
        self.key_id.push(key_id.to_string());
        self.turn.push(turn);
        self.cost.push(charged);
        self.account_id.push(account.to_string());
        self.task_type.push(task.task_type().to_string());
        self.params.push(task.operation.to_params());
        self.extras.push(task.extras.to_column());
        self.parent_seq.push(task.parent_seq);
        self.priority.push(task.priority);
        self.prompt.push(task.prompt.clone());
        self.lexemes.push(search_lexemes(&task.prompt, account));
        self.aspect_ratio.push(task.aspect_ratio.to_string());
        self.process_mode.push(task.process_mode.to_string());
        self.seed.push(task.seed);
        self.webhook_url.push(task.webhook_url.clone());
        self.webhook_secret.push(task.webhook_secret.clone());
    }
}
