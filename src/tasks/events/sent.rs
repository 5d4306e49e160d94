//! What a stream has said of each task: the last version (and the task's type), so that an
//! event it has already said is dropped. Bounded so that a long-lived stream of a busy account
//! holds about what it holds when new: every task that has not ended (up to
//! [`REMEMBERED_MAX`]), and of the ended ones only the last [`ENDED_KEPT`]. A late duplicate of
//! an event of an ended task that has been forgotten is said again, which at-least-once events
//! allow; a later change of it (its images removed) has a higher version and is said anyway.

use std::collections::{HashMap, VecDeque};

use crate::domain::OpKind;

/// The most tasks a stream remembers; beyond it, the half said longest ago are forgotten.
const REMEMBERED_MAX: usize = 4096;
/// The ended tasks a stream remembers, the last to end.
const ENDED_KEPT: usize = 128;

#[derive(Debug, Default)]
pub(super) struct Sent {
    versions: HashMap<i64, (i64, OpKind)>,
    /// The ended tasks remembered, in the order they ended.
    ended: VecDeque<i64>,
}

impl Sent {
    /// The last version said of the task at `seq`, and its type.
    pub fn get(&self, seq: i64) -> Option<(i64, OpKind)> {
        self.versions.get(&seq).copied()
    }

    /// The task at `seq` said at `version`, `ended` when that state is an end.
    pub fn note(&mut self, seq: i64, version: i64, kind: OpKind, ended: bool) {
        if self.versions.len() >= REMEMBERED_MAX && !self.versions.contains_key(&seq) {
            self.forget_older_half();
        }
        self.versions.insert(seq, (version, kind));
        if !ended || self.ended.contains(&seq) {
            return;
        }
        self.ended.push_back(seq);
        if self.ended.len() > ENDED_KEPT {
            if let Some(oldest) = self.ended.pop_front() {
                self.versions.remove(&oldest);
            }
            // A burst of live tasks has ended: give back the room it took.
            if self.versions.capacity() > 4 * (self.versions.len() + ENDED_KEPT) {
                self.versions.shrink_to(2 * self.versions.len());
            }
        }
    }

    fn forget_older_half(&mut self) {
        let mut versions: Vec<i64> = self.versions.values().map(|(v, _)| *v).collect();
        versions.sort_unstable();
        let cut = versions[versions.len() / 2];
        self.versions.retain(|_, (v, _)| *v > cut);
        let versions = &self.versions;
        self.ended.retain(|seq| versions.contains_key(seq));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.versions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_of_many_ended_tasks_remembers_the_live_ones_and_the_last_to_end() {
        let mut sent = Sent::default();
        // Ten tasks that stay live, then 100,000 that each are said queued, then ended.
        for seq in 0..10 {
            sent.note(seq, seq, OpKind::Imagine, false);
        }
        for seq in 10..100_010 {
            sent.note(seq, 2 * seq, OpKind::Imagine, false);
            sent.note(seq, 2 * seq + 1, OpKind::Imagine, true);
        }
        assert_eq!(sent.len(), 10 + ENDED_KEPT);
        assert!(sent.versions.capacity() <= 4 * (10 + ENDED_KEPT) * 2);
        for seq in 0..10 {
            assert_eq!(sent.get(seq), Some((seq, OpKind::Imagine)), "live {seq}");
        }
        assert_eq!(sent.get(100_009), Some((200_019, OpKind::Imagine)));
        assert_eq!(sent.get(10), None, "ended long ago: forgotten");
        // An ended task said again (its data removed) is not counted twice.
        sent.note(100_009, 300_000, OpKind::Imagine, true);
        assert_eq!(sent.ended.len(), ENDED_KEPT);
    }

    #[test]
    fn past_the_most_remembered_the_older_half_goes() {
        let mut sent = Sent::default();
        for seq in 0..REMEMBERED_MAX as i64 {
            sent.note(seq, seq, OpKind::Upscale1x, false);
        }
        assert_eq!(sent.len(), REMEMBERED_MAX);
        sent.note(-1, REMEMBERED_MAX as i64, OpKind::Upscale1x, false);
        assert!(sent.len() <= REMEMBERED_MAX / 2 + 1, "{}", sent.len());
        assert_eq!(sent.get(0), None);
        assert!(sent.get(REMEMBERED_MAX as i64 - 1).is_some());
    }
}
