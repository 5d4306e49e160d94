//! The task model: statuses and their transitions, and the validated values a task is made of.
//! Validation errors are short phrases without the field name; the API layer prefixes the field.

mod policy;
mod result;
mod task;

pub use policy::ContentPolicy;
pub use result::Outcome;
pub use task::{AspectRatio, ProcessMode, Prompt, TaskStatus, TaskType};
