//! How the OpenAPI document describes the OpenAI routes' bodies and answers. These types only
//! describe: the handlers read the bodies field by field (`fields.rs`), so that every error names
//! its `param`.

#![allow(dead_code)]

use std::collections::BTreeMap;

use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{IntoResponses, ToSchema};

use super::error::Body;

/// `POST /v1/images/generations`. Fields easel does not know are ignored.
#[derive(ToSchema)]
#[schema(as = OpenAiImageGenerationRequest)]
pub struct GenerationRequest {
    /// The prompt, with imagine's rules (1 to 4000 characters, Midjourney parameters allowed).
    prompt: String,
    /// An easel model (`GET /v1/models`); OpenAI's names (`dall-e-*`, `gpt-image-*`) run on the
    /// default model.
    model: Option<String>,
    /// 1 to 10 images, from ceil(n/4) imagine tasks.
    #[schema(minimum = 1, maximum = 10)]
    n: Option<u32>,
    /// `WIDTHxHEIGHT` (its aspect ratio, 1:4 to 4:1, at the model's size) or `auto` (1:1).
    size: Option<String>,
    /// `auto`, `low`, `medium`, `high`, `xhigh`, `max`, `standard` or `hd`: echoed, no effect.
    quality: Option<String>,
    /// `url` (default, but for `gpt-image-*` models) or `b64_json`.
    response_format: Option<String>,
    /// `png` (default), `jpeg` or `webp` (lossless).
    output_format: Option<String>,
    /// JPEG quality, 0 to 100 (default 100).
    #[schema(minimum = 0, maximum = 100)]
    output_compression: Option<u32>,
    /// `auto`, `transparent` or `opaque`: echoed, no effect (easel's images are opaque).
    background: Option<String>,
    /// Kept in the tasks' `metadata` as `openai_user` (at most 256 characters).
    user: Option<String>,
    /// Answer Server-Sent Events (`image_generation.partial_image`, `image_generation.completed`).
    stream: Option<bool>,
    /// Previews sent while streaming, 0 to 3.
    #[schema(minimum = 0, maximum = 3)]
    partial_images: Option<u32>,
}

/// `POST /v1/images/edits` (multipart). Fields easel does not know are ignored.
#[derive(ToSchema)]
#[schema(as = OpenAiImageEditRequest)]
pub struct EditRequest {
    /// The image (or up to 5 as `image[]`); PNG, JPEG, WebP or GIF.
    #[schema(value_type = String, format = Binary)]
    image: Vec<u8>,
    /// OpenAI's mask for the first image: its size, transparent where to redraw.
    #[schema(value_type = Option<String>, format = Binary)]
    mask: Option<Vec<u8>>,
    prompt: String,
    model: Option<String>,
    #[schema(minimum = 1, maximum = 10)]
    n: Option<u32>,
    size: Option<String>,
    quality: Option<String>,
    response_format: Option<String>,
    output_format: Option<String>,
    output_compression: Option<u32>,
    background: Option<String>,
    user: Option<String>,
    /// Answer Server-Sent Events (`image_edit.partial_image`, `image_edit.completed`).
    stream: Option<bool>,
    partial_images: Option<u32>,
}

/// `POST /v1/images/variations` (multipart). Fields easel does not know are ignored.
#[derive(ToSchema)]
#[schema(as = OpenAiImageVariationRequest)]
pub struct VariationRequest {
    #[schema(value_type = String, format = Binary)]
    image: Vec<u8>,
    model: Option<String>,
    #[schema(minimum = 1, maximum = 10)]
    n: Option<u32>,
    size: Option<String>,
    response_format: Option<String>,
    user: Option<String>,
}

/// One image: its URL (an easel file URL, no key needed) or its bytes in base64.
#[derive(ToSchema)]
#[schema(as = OpenAiImage)]
pub struct Image {
    url: Option<String>,
    b64_json: Option<String>,
}

/// The images of a call.
#[derive(ToSchema)]
#[schema(as = OpenAiImagesResponse)]
pub struct ImagesResponse {
    /// Unix seconds.
    created: u64,
    data: Vec<Image>,
    output_format: String,
    /// The images' `WIDTHxHEIGHT`.
    size: String,
    quality: String,
    background: Option<String>,
}

/// A model, in OpenAI's list shape.
#[derive(ToSchema)]
#[schema(as = OpenAiModel)]
pub struct Model {
    id: String,
    /// `model`.
    object: String,
    created: u64,
    owned_by: String,
}

/// `GET /v1/models`.
#[derive(ToSchema)]
#[schema(as = OpenAiModelList)]
pub struct ModelList {
    /// `list`.
    object: String,
    data: Vec<Model>,
}

/// The refusals of the image routes, the same on each but for the limit a request is over (413):
/// OpenAI's error body under every status.
fn refusals(over_limit: &str) -> BTreeMap<String, RefOr<Response>> {
    [
        ("400", "A field is wrong: `param` names it"),
        ("401", "No easel API key, or not a live one"),
        ("413", over_limit),
        ("429", "A rate limit or quota"),
        ("504", "Not ready within `openai_wait`; the tasks go on"),
    ]
    .into_iter()
    .map(|(status, description)| {
        let body = ContentBuilder::new()
            .schema(Some(Ref::from_schema_name(Body::name())))
            .build();
        let response = ResponseBuilder::new()
            .description(description)
            .content("application/json", body)
            .build();
        (status.to_string(), response.into())
    })
    .collect()
}

/// `POST /v1/images/generations`' refusals: its JSON body is read under `body_limit`.
pub struct BodyRefusals;

impl IntoResponses for BodyRefusals {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refusals("The body is over `body_limit`")
    }
}

/// The multipart routes' refusals (edits, variations): their form is read under
/// `mask_body_limit`.
pub struct FormRefusals;

impl IntoResponses for FormRefusals {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refusals("The form is over `mask_body_limit`")
    }
}
