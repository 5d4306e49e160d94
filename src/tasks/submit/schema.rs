//! The body each operation takes, as its OpenAPI schema: the parts of `request` that `draft`
//! reads for it, merged into one object (the order and the choice of parts follow
//! `Draft::parse`), and the schemas of the field types that take more than one JSON type.

use utoipa::openapi::schema::{Object, Schema};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::draft::takes_mode;
use super::generation::on_model;
use super::request::{
    self, AnyIndex, Aspect, Delivery, Factor, Generation, ImageIndex, Mode, OptionalIndex, Parent,
    Prompted, Reprompt, SeedOf,
};
use crate::domain::schema::{index_or, merged, one_of};
use crate::domain::{OpKind, PROMPT_MAX_CHARS};

/// A body's schema, and the named schemas it refers to (`components/schemas`).
pub struct Body {
    pub schema: Object,
    pub refs: Vec<(String, RefOr<Schema>)>,
}

/// The parts of a body, in order, as they are gathered.
#[derive(Default)]
struct Parts {
    parts: Vec<RefOr<Schema>>,
    refs: Vec<(String, RefOr<Schema>)>,
}

impl Parts {
    fn with<T: ToSchema>(mut self) -> Parts {
        T::schemas(&mut self.refs);
        self.parts.push(T::schema());
        self
    }

    fn with_if<T: ToSchema>(self, wanted: bool) -> Parts {
        if wanted {
            self.with::<T>()
        } else {
            self
        }
    }

    fn merged(self) -> Body {
        Body {
            schema: merged(self.parts),
            refs: self.refs,
        }
    }
}

/// The body of a submit of `kind`: its own fields, then `process_mode`, the delivery's fields
/// and the generation settings where `kind` takes them.
pub fn body(kind: OpKind) -> Body {
    use OpKind::*;
    let own = Parts::default();
    let own = match kind {
        Imagine => own.with::<Prompted>().with::<Aspect>(),
        Shorten => own.with::<Prompted>(),
        Upscale1x => own.with::<request::Upscale1x>(),
        UpscaleAlt => own.with::<request::UpscaleAlt>(),
        UpscaleHighres => own
            .with::<request::UpscaleHighres>()
            .with::<OptionalIndex>(),
        Variations => own
            .with::<request::Variations>()
            .with::<Reprompt>()
            .with::<Aspect>(),
        Reroll => own.with::<Parent>().with::<Reprompt>().with::<Aspect>(),
        Pan => own.with::<request::Pan>().with::<Reprompt>(),
        Outpaint => own
            .with::<request::Outpaint>()
            .with::<Reprompt>()
            .with::<Aspect>(),
        Inpaint => own.with::<request::Inpaint>().with::<Reprompt>(),
        Blend => own.with::<request::Blend>(),
        Describe => own.with::<request::Describe>(),
        Seed => own.with::<SeedOf>(),
        Faceswap => own.with::<request::Faceswap>(),
    };
    let mut body = own
        .with_if::<Mode>(takes_mode(kind))
        .with::<Delivery>()
        .with_if::<Generation>(on_model(kind))
        .merged();
    let schema = &mut body.schema;
    match kind {
        // Imagine's aspect ratio has a default of its own; a follow-up's is its parent's.
        Imagine => with(schema, "aspect_ratio", |p| p.default = Some("1:1".into())),
        // Shorten takes no image prompts: its prompt is text alone, within the prompt's limit.
        Shorten => with(schema, "prompt", |p| p.max_length = Some(PROMPT_MAX_CHARS)),
        UpscaleHighres => {
            schema.description = Some("Exactly one of `parent_task_id` and `image_url`.".into())
        }
        Faceswap => {
            schema.description = Some(
                "Refused with 400 `unsupported_operation` unless a configured backend can swap \
                 faces; none can yet."
                    .into(),
            )
        }
        _ => {}
    }
    body
}

/// Change the inline schema of `body`'s property `name`.
fn with(body: &mut Object, name: &str, change: impl FnOnce(&mut Object)) {
    match body.properties.get_mut(name) {
        Some(RefOr::T(Schema::Object(property))) => change(property),
        _ => panic!("{name} is an inline schema of the body"),
    }
}

impl PartialSchema for ImageIndex {
    fn schema() -> RefOr<Schema> {
        index_or(["1", "2", "3", "4"], "An image of a grid, 1 to 4.")
    }
}

impl ToSchema for ImageIndex {}

impl PartialSchema for AnyIndex {
    fn schema() -> RefOr<Schema> {
        index_or(
            ["1", "2", "3", "4", "strong", "subtle"],
            "An image of a grid, 1 to 4; or, of an upscale, \"strong\" or \"subtle\".",
        )
    }
}

impl ToSchema for AnyIndex {
    fn name() -> std::borrow::Cow<'static, str> {
        "VariationIndex".into()
    }
}

impl PartialSchema for Factor {
    fn schema() -> RefOr<Schema> {
        let mut factors = one_of(["2x", "4x"]);
        factors.description = Some("How many times the image's size.".into());
        factors.into()
    }
}

impl ToSchema for Factor {
    fn name() -> std::borrow::Cow<'static, str> {
        "UpscaleFactor".into()
    }
}
