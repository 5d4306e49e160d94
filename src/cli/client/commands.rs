//! What the client commands take, as clap reads them from the command line: each command's
//! own arguments, and the settings they share (the server, a generation's settings, waiting).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

/// What every client command takes.
#[derive(clap::Args, Clone, Debug)]
pub struct Server {
    /// The server's base URL (EASEL_URL).
    #[arg(long, env = "EASEL_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Print the task record (or list) as JSON instead of image URLs.
    #[arg(long)]
    pub json: bool,
}

/// The model and generation settings of a command that makes images; each left out is the
/// server's default (the model's, or the parent's model for `upscale`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Generation {
    /// The model to run on (`easel models` lists them).
    #[arg(long)]
    pub model: Option<String>,
    /// What must not be drawn.
    #[arg(long = "negative-prompt", value_name = "TEXT")]
    pub negative_prompt: Option<String>,
    /// Sampling steps, within the model's limits.
    #[arg(long)]
    pub steps: Option<u32>,
    /// Guidance, within the model's limits.
    #[arg(long = "cfg-scale", value_name = "NUMBER")]
    pub cfg_scale: Option<f64>,
    /// A sampler the model's backends know (euler_a, dpmpp_2m_karras, ...).
    #[arg(long)]
    pub sampler: Option<String>,
}

impl Generation {
    /// The settings given, added to a submit's body.
    pub(super) fn add_to(&self, body: &mut Value) {
        let fields = [
            ("model", self.model.as_ref().map(|v| json!(v))),
            (
                "negative_prompt",
                self.negative_prompt.as_ref().map(|v| json!(v)),
            ),
            ("steps", self.steps.map(|v| json!(v))),
            ("cfg_scale", self.cfg_scale.map(|v| json!(v))),
            ("sampler", self.sampler.as_ref().map(|v| json!(v))),
        ];
        for (name, value) in fields {
            if let Some(value) = value {
                body[name] = value;
            }
        }
    }
}

/// What a command that makes images takes besides its own arguments: the generation settings,
/// the caller's metadata, and how it ends.
#[derive(clap::Args, Clone, Debug)]
pub struct Making {
    #[command(flatten)]
    pub generation: Generation,
    /// A JSON object kept with the task and echoed in its record and webhooks.
    #[arg(long, value_name = "JSON")]
    pub metadata: Option<String>,
    #[command(flatten)]
    pub waiting: Waiting,
}

/// What a follow-up of a task takes besides the parent and its own arguments: a new prompt,
/// what a command that makes images takes, and the server.
#[derive(clap::Args, Clone, Debug)]
pub struct FollowUp {
    /// A new prompt (default: the parent's).
    #[arg(long)]
    pub prompt: Option<String>,
    #[command(flatten)]
    pub making: Making,
    #[command(flatten)]
    pub server: Server,
}

/// How a command that makes a task ends.
#[derive(clap::Args, Clone, Debug)]
pub struct Waiting {
    /// Wait until the task is finished or failed, showing its progress.
    #[arg(long)]
    pub wait: bool,
    /// Download the images into this folder (implies --wait).
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Give up waiting after this long.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub timeout: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    crate::config::duration::parse(text)
}

/// A client command, with the server it talks to.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum Request {
    /// Client: submit an imagine task to the server at --url (key: EASEL_API_KEY).
    Imagine {
        prompt: String,
        /// Aspect ratio, like 16:9.
        #[arg(long = "ar", value_name = "W:H")]
        aspect_ratio: Option<String>,
        /// Make N tasks of the prompt (its `--repeat N`), stored together; at most the plan's
        /// batch_max.
        #[arg(long, value_name = "N")]
        repeat: Option<u32>,
        #[command(flatten)]
        making: Making,
        #[command(flatten)]
        server: Server,
    },
    /// Client: upscale image INDEX (1 to 4) of a finished grid task.
    Upscale {
        task: String,
        index: u8,
        #[command(flatten)]
        making: Making,
        #[command(flatten)]
        server: Server,
    },
    /// Client: four variations of image INDEX (1 to 4, or strong/subtle of an upscale).
    Variations {
        task: String,
        index: String,
        #[command(flatten)]
        follow_up: FollowUp,
    },
    /// Client: a grid task's prompt again, with a new seed.
    Reroll {
        task: String,
        #[command(flatten)]
        follow_up: FollowUp,
    },
    /// Client: extend an upscaled image in one direction (up, down, left or right).
    Pan {
        task: String,
        direction: String,
        #[command(flatten)]
        follow_up: FollowUp,
    },
    /// Client: zoom out of an upscaled image by RATIO (1 to 2; 1 makes it square), drawing the
    /// surroundings (the outpaint operation).
    Zoom {
        task: String,
        ratio: f64,
        #[command(flatten)]
        follow_up: FollowUp,
    },
    /// Client: redraw the part of an upscaled image that the mask marks (white, opaque pixels).
    Inpaint {
        task: String,
        /// A PNG the size of the parent's image.
        #[arg(long, value_name = "FILE")]
        mask: PathBuf,
        #[command(flatten)]
        follow_up: FollowUp,
    },
    /// Client: a grid mixing 2 to 5 images (URLs or files).
    Blend {
        #[arg(num_args = 2..=5, required = true, value_name = "IMAGE")]
        images: Vec<String>,
        /// square, portrait or landscape.
        #[arg(long)]
        dimension: Option<String>,
        #[command(flatten)]
        making: Making,
        #[command(flatten)]
        server: Server,
    },
    /// Client: four prompts that could have made an image (a URL or a file).
    Describe {
        image: String,
        #[command(flatten)]
        making: Making,
        #[command(flatten)]
        server: Server,
    },
    /// Client: submit the requests of FILE (JSON Lines, one `{"operation": ..., "body": {...}}`
    /// a line) as one batch (POST /api/v1/batch): all stored, or none.
    Batch {
        file: PathBuf,
        #[command(flatten)]
        waiting: Waiting,
        #[command(flatten)]
        server: Server,
    },
    /// Client: show a task (its image URLs, or --json its record).
    Fetch {
        task: String,
        /// Download the images into this folder.
        #[arg(long, value_name = "DIR")]
        output: Option<PathBuf>,
        #[command(flatten)]
        server: Server,
    },
    /// Client: list the account's tasks (GET /api/v1/tasks).
    Tasks {
        #[command(flatten)]
        server: Server,
    },
    /// Client: list the models the key's account may use (GET /api/v1/models).
    Models {
        #[command(flatten)]
        server: Server,
    },
    /// Client: cancel a task that has not ended (POST /api/v1/tasks/TASK/cancel).
    Cancel {
        task: String,
        #[command(flatten)]
        server: Server,
    },
    /// Client: upload an image file (POST /api/v1/upload) and print the answer, whose `url`
    /// every image field and image prompt takes.
    Upload {
        file: PathBuf,
        #[command(flatten)]
        server: Server,
    },
}
