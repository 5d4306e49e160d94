//! Image generators. A generator runs one operation ([`Job`]) on its inputs and hands back what
//! it made ([`Product`]): images as encoded files (`images::stored`: PNG, or a backend's JPEG), text or
//! a seed; the worker stores them. The built-in procedural generator ([`Procedural`]) does every
//! operation and needs nothing installed.

pub mod backends;
mod builtin;
mod job;
pub mod ops;
pub mod pool;
pub mod procedural;
mod progress;

pub use builtin::Procedural;
pub use job::{Answered, GenerateError, Generation, Generator, Job, Openings, Product, Progress};
