//! Apiframe v1's older Midjourney routes, which its official SDK still calls, answered as easel's
//! own operations: each body is rewritten into the operation's, then submitted as any other. The
//! bodies are read field by field ([`Alias::translate`]); their schemas say what it takes.

use serde_json::{json, Map, Value};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::ToSchema;

use super::super::body::{task_id, JsonObject};
use super::super::Tasks;
use super::request::ImageIndex;
use super::schema::{body, Body};
use crate::auth::PresentedKey;
use crate::domain::schema::merged;
use crate::domain::OpKind;
use crate::refusal::ApiError;

/// An alias route, by the path after `/api/v1/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alias {
    /// `midjourney/upscale` `{taskId, index}`: upscale-1x.
    Upscale,
    /// `midjourney/vary` `{taskId, index, strength?}`: variations.
    Vary,
    /// `midjourney/zoom` `{taskId, zoom?}`: outpaint.
    Zoom,
}

impl Alias {
    pub const ALL: [(&'static str, Alias); 3] = [
        ("midjourney/upscale", Alias::Upscale),
        ("midjourney/vary", Alias::Vary),
        ("midjourney/zoom", Alias::Zoom),
    ];

    pub fn from_path(path: &str) -> Option<Alias> {
        Alias::ALL
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, alias)| *alias)
    }

    /// The operation it answers as.
    pub fn kind(self) -> OpKind {
        match self {
            Alias::Upscale => OpKind::Upscale1x,
            Alias::Vary => OpKind::Variations,
            Alias::Zoom => OpKind::Outpaint,
        }
    }

    /// What this route's body takes: its own fields, then the operation's but those it fills
    /// from them.
    pub fn body_schema(self) -> Body {
        let Body {
            schema: mut operation,
            mut refs,
        } = body(self.kind());
        fn own<T: ToSchema>(refs: &mut Vec<(String, RefOr<Schema>)>) -> RefOr<Schema> {
            T::schemas(refs);
            T::schema()
        }
        let own = match self {
            Alias::Upscale => own::<UpscaleBody>(&mut refs),
            Alias::Vary => own::<VaryBody>(&mut refs),
            Alias::Zoom => own::<ZoomBody>(&mut refs),
        };
        for filled in ["parent_task_id", "zoom_ratio"] {
            operation.properties.shift_remove(filled);
            operation.required.retain(|name| name != filled);
        }
        if self == Alias::Vary {
            // An upscale parent's index comes from `strength`.
            operation.required.retain(|name| name != "index");
        }
        Body {
            schema: merged([own, operation.into()]),
            refs,
        }
    }

    /// The operation's body for this alias's `body`: `taskId` becomes `parent_task_id`, and the
    /// rest what the operation calls it. Every other field (webhook_url, webhook_secret, and
    /// easel's own) is kept, so that the operation's rules judge them as usual.
    pub async fn translate(
        self,
        tasks: &Tasks,
        key: &PresentedKey,
        body: JsonObject,
    ) -> Result<JsonObject, ApiError> {
        let mut map: Map<String, Value> = body.0;
        let parent = match map.remove("taskId") {
            Some(Value::String(id)) => id,
            None | Some(Value::Null) => {
                return Err(ApiError::field("taskId", "missing_field", "is required"))
            }
            Some(_) => {
                return Err(ApiError::field(
                    "taskId",
                    "invalid_type",
                    "must be a string",
                ))
            }
        };
        match self {
            Alias::Upscale => {}
            Alias::Vary => {
                let strength = map.remove("strength").filter(|s| !s.is_null());
                // Only an upscale parent takes a strength; a grid parent takes its index. A
                // parent that cannot be read is left for the operation's own checks to name.
                let id = task_id("taskId", &parent)?;
                let of_upscale = tasks
                    .one(key, id)
                    .await
                    .is_ok_and(|p| p.task_type.is_upscale());
                if of_upscale {
                    let strength = match strength {
                        None => 0.5,
                        Some(v) => {
                            v.as_f64()
                                .filter(|s| (0.0..=1.0).contains(s))
                                .ok_or_else(|| {
                                    ApiError::field(
                                        "strength",
                                        "invalid_value",
                                        "must be a number from 0 to 1",
                                    )
                                })?
                        }
                    };
                    let index = if strength > 0.5 { "strong" } else { "subtle" };
                    map.insert("index".into(), json!(index));
                }
            }
            Alias::Zoom => {
                let zoom = map
                    .remove("zoom")
                    .filter(|z| !z.is_null())
                    .unwrap_or(json!(2));
                map.insert("zoom_ratio".into(), zoom);
            }
        }
        map.insert("parent_task_id".into(), Value::String(parent));
        Ok(JsonObject(map))
    }
}

/// `midjourney/upscale`'s own fields.
#[derive(ToSchema)]
pub struct UpscaleBody {
    /// The parent task (easel's `parent_task_id`).
    #[schema(rename = "taskId", value_type = uuid::Uuid)]
    pub task_id: String,
    /// Which image of the grid parent, 1 to 4; an integer or a string.
    pub index: ImageIndex,
}

/// `midjourney/vary`'s own fields; `index` is variations'.
#[derive(ToSchema)]
pub struct VaryBody {
    /// The parent task (easel's `parent_task_id`).
    #[schema(rename = "taskId", value_type = uuid::Uuid)]
    pub task_id: String,
    /// Where the parent is an upscale: above 0.5 is `strong`, else `subtle` (default 0.5).
    /// Ignored for a grid parent.
    #[schema(minimum = 0, maximum = 1)]
    pub strength: Option<f64>,
}

/// `midjourney/zoom`'s own fields.
#[derive(ToSchema)]
pub struct ZoomBody {
    /// The parent task (easel's `parent_task_id`).
    #[schema(rename = "taskId", value_type = uuid::Uuid)]
    pub task_id: String,
    /// easel's `zoom_ratio`.
    #[schema(minimum = 1, maximum = 2, default = 2)]
    pub zoom: Option<f64>,
}
