//! The node's memory budget for decoded input images (`decode_memory_budget`), shared by every
//! worker of the node.
//!
//! A task reserves what its whole set of images needs before it decodes any of them, so that two
//! tasks can never each hold part of the budget while waiting for the rest. The reservation lives
//! as long as the decoded pixels do, and gives its bytes back when dropped. The semaphore counts
//! KiB, so that a budget of terabytes still fits its 32-bit requests.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::decode::{decode_probed, probe, Header};
use super::{InputError, InputLimits};
use crate::images::RgbaImage;

const KIB: u64 = 1024;

/// The budget: cheap to clone, every clone sharing it.
#[derive(Clone, Debug)]
pub struct DecodeBudget {
    kib: Arc<Semaphore>,
    bytes: u64,
}

/// A share of the budget, given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    permit: OwnedSemaphorePermit,
}

/// A task's input images, decoded, and the share of the budget their pixels hold: keep it for
/// as long as the images.
#[derive(Debug)]
pub struct Decoded {
    pub images: Vec<RgbaImage>,
    pub reservation: Reservation,
}

impl DecodeBudget {
    /// A budget of `bytes`, rounded down to whole KiB.
    pub fn new(bytes: u64) -> DecodeBudget {
        let kib = (bytes / KIB).min(u64::from(u32::MAX));
        DecodeBudget {
            kib: Arc::new(Semaphore::new(kib as usize)),
            bytes: kib * KIB,
        }
    }

    /// The whole budget, in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes not reserved now.
    pub fn available(&self) -> u64 {
        self.kib.available_permits() as u64 * KIB
    }

    /// Reserve `bytes` all at once, waiting while other reservations hold the budget; requests
    /// are served in order, so a large one is not passed over forever by smaller ones behind it.
    /// More than the whole budget fails at once with [`InputError::OverBudget`]: waiting would
    /// never end.
    pub async fn reserve(&self, bytes: u64) -> Result<Reservation, InputError> {
        let kib = bytes.div_ceil(KIB);
        if kib * KIB > self.bytes {
            return Err(InputError::OverBudget {
                needed: bytes,
                budget: self.bytes,
            });
        }
        let permit = self
            .kib
            .clone()
            .acquire_many_owned(kib as u32)
            .await
            .expect("the budget's semaphore is never closed");
        Ok(Reservation { permit })
    }
}

impl DecodeBudget {
    /// Decode a task's images, each given with the name of its input (`image_urls[1]`): read
    /// every header, reserve what the whole set needs at once (waiting while other tasks hold
    /// the budget), then decode them one after another, so that one decoder's working memory at
    /// a time is enough. What stays reserved is the pixels'. An error names the input.
    pub async fn decode_all(
        &self,
        inputs: Vec<(String, bytes::Bytes)>,
        limits: InputLimits,
    ) -> Result<Decoded, String> {
        let names: Vec<String> = inputs.iter().map(|(name, _)| name.clone()).collect();
        let crashed =
            |e: tokio::task::JoinError| format!("{}: the decoder crashed: {e}", subject(&names));
        let (inputs, headers) = tokio::task::spawn_blocking(move || {
            let headers: Result<Vec<Header>, String> = inputs
                .iter()
                .map(|(name, bytes)| probe(bytes, &limits).map_err(|e| format!("{name}: {e}")))
                .collect();
            (inputs, headers)
        })
        .await
        .map_err(crashed)?;
        let headers = headers?;
        let held: u64 = headers.iter().map(Header::held_bytes).sum();
        let working = headers.iter().map(Header::working_bytes).max().unwrap_or(0);
        let needed = held + working;
        if needed > self.available() && needed <= self.bytes {
            crate::metrics::decode_budget_wait();
            tracing::info!(
                needed,
                available = self.available(),
                "waiting for the decode memory budget"
            );
        }
        let mut reservation = self
            .reserve(needed)
            .await
            .map_err(|e| format!("{}: {e}", subject(&names)))?;
        tokio::task::spawn_blocking(move || {
            let mut images = Vec::with_capacity(inputs.len());
            // Each file is dropped once decoded.
            for ((name, bytes), header) in inputs.into_iter().zip(&headers) {
                let image =
                    decode_probed(&bytes, header, &limits).map_err(|e| format!("{name}: {e}"))?;
                images.push(image);
            }
            reservation.shrink_to(held);
            Ok(Decoded {
                images,
                reservation,
            })
        })
        .await
        .map_err(crashed)?
    }
}

/// What an error about a whole set of inputs names: the input when there is one, the list
/// (`image_urls`) when all are its items, else all of them.
fn subject(names: &[String]) -> String {
    let list = |name: &String| name.split_once('[').map(|(list, _)| list.to_owned());
    match names {
        [one] => one.clone(),
        [first, rest @ ..]
            if list(first).is_some() && rest.iter().all(|n| list(n) == list(first)) =>
        {
            list(first).unwrap_or_default()
        }
        _ => names.join(" and "),
    }
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.permit.num_permits() as u64 * KIB
    }

    /// Give back all but `bytes` (rounded up to whole KiB); nothing when it holds no more.
    pub fn shrink_to(&mut self, bytes: u64) {
        let keep = bytes.div_ceil(KIB) as usize;
        let held = self.permit.num_permits();
        if held > keep {
            drop(self.permit.split(held - keep));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::images::inputs::samples::{limits, png16_bytes, png_bytes};

    const MIB: u64 = 1 << 20;

    /// Whether `future` is still waiting after a moment.
    async fn waits<F: std::future::Future>(future: F) -> bool {
        tokio::time::timeout(Duration::from_millis(50), future)
            .await
            .is_err()
    }

    #[tokio::test]
    async fn reservations_take_and_give_back_their_bytes() {
        let budget = DecodeBudget::new(10 * MIB);
        assert_eq!(budget.bytes(), 10 * MIB);
        let a = budget.reserve(4 * MIB).await.unwrap();
        // Rounded up to whole KiB.
        let mut b = budget.reserve(3 * MIB + 1).await.unwrap();
        assert_eq!((a.bytes(), b.bytes()), (4 * MIB, 3 * MIB + KIB));
        assert_eq!(budget.available(), 3 * MIB - KIB);
        b.shrink_to(MIB);
        assert_eq!(budget.available(), 5 * MIB);
        b.shrink_to(2 * MIB);
        assert_eq!(b.bytes(), MIB, "shrinking never grows a reservation");
        drop((a, b));
        assert_eq!(budget.available(), 10 * MIB);
        assert_eq!(budget.clone().available(), 10 * MIB, "clones share it");
    }

    #[tokio::test]
    async fn a_reservation_that_does_not_fit_now_waits_for_one_to_end() {
        let budget = DecodeBudget::new(10 * MIB);
        let mut first = budget.reserve(8 * MIB).await.unwrap();
        let second = budget.reserve(5 * MIB);
        tokio::pin!(second);
        assert!(waits(&mut second).await);
        // Part of the first given back is not yet enough; all that the second needs is.
        first.shrink_to(6 * MIB);
        assert!(waits(&mut second).await);
        first.shrink_to(5 * MIB);
        let second = second.await.unwrap();
        assert_eq!(budget.available(), 0);
        drop((first, second));
        assert_eq!(budget.available(), 10 * MIB);
    }

    /// Requests are served in order: a large one waiting is not passed over by small ones that
    /// would fit, which would otherwise keep it waiting for as long as small ones kept coming.
    #[tokio::test]
    async fn a_large_reservation_waiting_is_not_passed_over() {
        let budget = DecodeBudget::new(10 * MIB);
        let held = budget.reserve(6 * MIB).await.unwrap();
        let large = budget.reserve(8 * MIB);
        tokio::pin!(large);
        assert!(waits(&mut large).await);
        assert!(waits(budget.reserve(MIB)).await);
        drop(held);
        let large = large.await.unwrap();
        assert_eq!(large.bytes(), 8 * MIB);
    }

    #[tokio::test]
    async fn more_than_the_whole_budget_fails_at_once() {
        let budget = DecodeBudget::new(10 * MIB);
        let _held = budget.reserve(10 * MIB).await.unwrap();
        let err = budget.reserve(10 * MIB + 1).await.unwrap_err();
        assert!(
            matches!(err, InputError::OverBudget { needed, budget } if needed == 10 * MIB + 1 && budget == 10 * MIB),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "decoding needs 10.1 MiB at once, more than the 10 MiB this node allows"
        );
    }

    /// Two tasks that each need most of the budget, many times over at once: each takes its
    /// whole need or nothing, so they take turns and none is left holding half of it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_that_need_most_of_the_budget_take_turns() {
        let budget = DecodeBudget::new(10 * MIB);
        let tasks = (0..20).map(|_| {
            let budget = budget.clone();
            tokio::spawn(async move {
                let held = budget.reserve(7 * MIB).await.unwrap();
                tokio::task::yield_now().await;
                assert!(budget.available() <= 3 * MIB);
                drop(held);
            })
        });
        let all = futures::future::join_all(tasks);
        let done = tokio::time::timeout(Duration::from_secs(10), all).await;
        assert!(done.unwrap().into_iter().all(|r| r.is_ok()));
        assert_eq!(budget.available(), 10 * MIB);
    }

    fn named(files: &[(&str, Vec<u8>)]) -> Vec<(String, bytes::Bytes)> {
        files
            .iter()
            .map(|(name, bytes)| (name.to_string(), bytes.clone().into()))
            .collect()
    }

    /// The set's whole need is reserved for the decoding; what stays reserved afterwards is its
    /// pixels', until the images' reservation is dropped.
    #[tokio::test]
    async fn a_set_keeps_what_its_pixels_hold_until_it_is_dropped() {
        let budget = DecodeBudget::new(64 * MIB);
        let files = named(&[
            ("image_urls[0]", png_bytes(100, 80)),
            ("image_urls[1]", png16_bytes(200, 50, true)),
        ]);
        let decoded = budget.decode_all(files, limits()).await.unwrap();
        assert_eq!(decoded.images.len(), 2);
        assert_eq!(
            (decoded.images[1].width, decoded.images[1].height),
            (200, 50)
        );
        let held = (100 * 80 + 200 * 50) * 4;
        assert_eq!(
            decoded.reservation.bytes(),
            (held as u64).div_ceil(KIB) * KIB
        );
        assert_eq!(budget.available(), 64 * MIB - decoded.reservation.bytes());
        drop(decoded);
        assert_eq!(budget.available(), 64 * MIB);
    }

    #[tokio::test]
    async fn a_set_over_the_whole_budget_fails_naming_its_inputs() {
        let budget = DecodeBudget::new(2 * MIB);
        let big = png_bytes(400, 400);
        let err = budget
            .decode_all(
                named(&[
                    ("image_urls[0]", big.clone()),
                    ("image_urls[1]", big.clone()),
                ]),
                limits(),
            )
            .await
            .unwrap_err();
        assert!(
            err.starts_with("image_urls: decoding needs ")
                && err.ends_with(" at once, more than the 2 MiB this node allows"),
            "{err}"
        );
        let err = budget
            .decode_all(
                named(&[("parent_task_id", big.clone()), ("mask", big)]),
                limits(),
            )
            .await
            .unwrap_err();
        assert!(
            err.starts_with("parent_task_id and mask: decoding needs "),
            "{err}"
        );
        // One of them alone fits.
        let one = named(&[("image_url", png_bytes(400, 400))]);
        assert!(budget.decode_all(one, limits()).await.is_ok());
        assert_eq!(budget.available(), 2 * MIB);
    }

    /// A file that cannot be decoded fails the set naming it, before anything is reserved when
    /// its header is bad, and giving back what was reserved when its pixels are.
    #[tokio::test]
    async fn a_bad_input_fails_naming_it_and_gives_the_budget_back() {
        let budget = DecodeBudget::new(64 * MIB);
        let good = png_bytes(60, 40);
        let cut = good[..good.len() - 40].to_vec();
        for (bad, says) in [
            (b"not an image".to_vec(), "image_urls[1]: not a PNG"),
            (cut, "image_urls[1]: could not be decoded: "),
        ] {
            let files = named(&[("image_urls[0]", good.clone()), ("image_urls[1]", bad)]);
            let err = budget.decode_all(files, limits()).await.unwrap_err();
            assert!(err.starts_with(says), "{err}");
            assert_eq!(budget.available(), 64 * MIB);
        }
    }

    /// A set that does not fit beside another waits for it, then decodes.
    #[tokio::test]
    async fn a_set_waits_for_room_then_decodes() {
        let budget = DecodeBudget::new(4 * MIB);
        let held = budget.reserve(3 * MIB).await.unwrap();
        let files = named(&[("image_url", png_bytes(400, 400))]);
        let decoding = budget.decode_all(files, limits());
        tokio::pin!(decoding);
        assert!(waits(&mut decoding).await);
        drop(held);
        let decoded = decoding.await.unwrap();
        assert_eq!(decoded.images[0].data.len(), 400 * 400 * 4);
    }
}
