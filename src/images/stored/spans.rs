//! The parts of a file that stripping keeps, and the file made of them.

use std::ops::Range;

/// The parts of a file to keep, in order, adjacent parts joined.
#[derive(Default)]
pub(super) struct Spans(Vec<Range<usize>>);

impl Spans {
    pub(super) fn keep(&mut self, part: Range<usize>) {
        match self.0.last_mut() {
            Some(last) if last.end == part.start => last.end = part.end,
            _ => self.0.push(part),
        }
    }

    /// The parts of `bytes`, copied into a file of their own.
    pub(super) fn gather(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.iter().map(|p| p.len()).sum());
        for part in &self.0 {
            out.extend_from_slice(&bytes[part.clone()]);
        }
        out
    }

    /// The parts of `bytes`, moved down over what is dropped (each part starts at or after where
    /// it goes, as the parts are in order): no second buffer. A file with nothing to drop is
    /// returned as it is.
    pub(super) fn compact(&self, mut bytes: Vec<u8>) -> Vec<u8> {
        let mut to = 0;
        for part in &self.0 {
            if part.start != to {
                bytes.copy_within(part.clone(), to);
            }
            to += part.len();
        }
        bytes.truncate(to);
        bytes
    }
}
