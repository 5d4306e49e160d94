//! Model backends: the servers people run their image models on, driven over HTTP. Each kind is
//! an adapter implementing [`Generator`](super::Generator); the pool (`generate::pool`) spreads
//! tasks over the configured ones. Their `[[backends]]` settings live in `config::backends`;
//! `http` sorts HTTP answers and failures into the errors a task understands, and
//! `images` holds the image work the kinds share. Each kind keeps its protocol client apart from
//! its image and workflow work, and none of them reaches back up here but for the settings.

mod build;
pub mod comfyui;
pub mod http;
pub mod images;
pub mod openai;
pub mod sdwebui;

pub use build::build;

/// The `[[backends]]` settings live with the other settings; the adapters read them from here.
pub use crate::config::backends::{kind_can, BackendConfig, BackendKind};
