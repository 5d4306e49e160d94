//! The task model: statuses and their transitions, operations and their outputs, and the
//! validated values a task is made of. Validation errors are short phrases without the field
//! name; the API layer prefixes the field.

pub mod operation;
mod policy;
mod result;
mod task;

pub use operation::{OpKind, Operation, Output, Shape};
pub use policy::ContentPolicy;
pub use result::{Outcome, PayloadHead};
pub use task::{prompt_text, AspectRatio, ProcessMode, Prompt, TaskStatus};
