//! OpenAPI schemas of the domain's words and helpers for schemas made of parts. The words
//! (operations, statuses, modes, directions, ...) take their values from the same strum names
//! the code parses and prints, so the document cannot list a name the API does not take. A body
//! read in parts, or a record serialized with flattened parts, is documented as one object
//! ([`merged`], [`flat`]): what a caller sends and receives is one object, whatever the code's
//! parts.

use std::borrow::Cow;

use strum::VariantArray;
use utoipa::openapi::schema::{Object, ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::operation::{AltKind, Dimension, OpKind, PanDirection};
use super::task::{ProcessMode, TaskStatus};
use super::webhook_events::WebhookEvent;

/// A string that is one of `names`.
pub fn one_of(names: impl IntoIterator<Item = &'static str>) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(names))
        .build()
}

/// A named schema (`components/schemas/NAME`) for each enum: its names and what it is.
macro_rules! words {
    ($($ty:ty => $name:literal, $names:expr, $doc:literal;)*) => {$(
        impl PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                let mut schema = one_of($names);
                schema.description = Some($doc.into());
                schema.into()
            }
        }

        impl ToSchema for $ty {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
        }
    )*};
}

words! {
    OpKind => "TaskType", OpKind::ALL.iter().map(|k| k.as_str()),
        "An operation: the `task_type` of its tasks and the path of its submit.";
    TaskStatus => "TaskStatus", TaskStatus::ALL.iter().map(|s| s.as_str()),
        "pending, starting and processing until the task ends; then finished, failed, or \
         canceled (by `POST /api/v1/tasks/{task_id}/cancel`).";
    ProcessMode => "ProcessMode", ProcessMode::VARIANTS.iter().map(|m| m.as_str()),
        "The queue class: turbo is served before fast before relax.";
    AltKind => "UpscaleAltType", AltKind::VARIANTS.iter().map(|k| k.as_str()),
        "upscale-alt's kind of upscale.";
    PanDirection => "PanDirection", PanDirection::VARIANTS.iter().map(|d| d.as_str()),
        "Where pan extends the image.";
    Dimension => "Dimension", Dimension::VARIANTS.iter().map(|d| d.as_str()),
        "blend's shape: square 1:1, portrait 2:3, landscape 3:2.";
    WebhookEvent => "WebhookEvent", WebhookEvent::ALL.iter().map(|e| e.as_str()),
        "A delivery a task's webhook may get: `progress` (while it runs, at most one a second, \
         one attempt), `completed` (finished), `failed`, `canceled`.";
}

/// An image of a grid, 1 to 4, as an integer; or one of `words` (a number as a string, or a
/// strength), as callers send `index`.
pub fn index_or(words: impl IntoIterator<Item = &'static str>, description: &str) -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .maximum(Some(4)),
        )
        .item(one_of(words))
        .description(Some(description))
        .into()
}

/// The objects of `parts` as one object: their properties in order (of two with the same name,
/// the first), and the names each requires. An `allOf` part is taken apart the same way.
///
/// # Panics
/// On a part that is neither an object nor an `allOf` of objects: only those merge, and the
/// parts are the code's own types, so a test that builds the document finds it.
pub fn merged(parts: impl IntoIterator<Item = RefOr<Schema>>) -> Object {
    let mut one = ObjectBuilder::new().schema_type(Type::Object).build();
    for part in parts {
        absorb(&mut one, part);
    }
    one
}

fn absorb(into: &mut Object, part: RefOr<Schema>) {
    match part {
        RefOr::T(Schema::Object(part)) => {
            for (name, property) in part.properties {
                if !into.properties.contains_key(&name) {
                    into.properties.insert(name, property);
                }
            }
            for name in part.required {
                if !into.required.contains(&name) {
                    into.required.push(name);
                }
            }
        }
        RefOr::T(Schema::AllOf(all)) => {
            for item in all.items {
                absorb(into, item);
            }
        }
        _ => panic!("only objects (and allOf of objects) merge into one object"),
    }
}

/// `schema` with an `allOf` of inline objects, which is how utoipa derives a struct with
/// `#[serde(flatten)]` fields, as the one object it serializes to. utoipa puts the struct's own
/// fields last: they come first here, and win over a flattened field of the same name.
pub fn flat(schema: RefOr<Schema>) -> RefOr<Schema> {
    match schema {
        RefOr::T(Schema::AllOf(mut all))
            if all
                .items
                .iter()
                .all(|item| matches!(item, RefOr::T(Schema::Object(_)))) =>
        {
            all.items.rotate_right(1);
            let mut one = merged(all.items);
            one.description = all.description;
            one.into()
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn json_of(schema: impl Into<RefOr<Schema>>) -> Value {
        serde_json::to_value(schema.into()).unwrap()
    }

    #[test]
    fn words_are_the_names_the_code_parses() {
        let kinds = json_of(OpKind::schema());
        assert_eq!(kinds["enum"][1], "upscale-1x");
        assert_eq!(kinds["enum"].as_array().unwrap().len(), OpKind::ALL.len());
        assert_eq!(OpKind::name(), "TaskType");
        assert_eq!(json_of(TaskStatus::schema())["enum"][5], "canceled");
    }

    #[test]
    fn parts_merge_into_one_object_and_the_first_of_a_name_wins() {
        let part = |name: &str, kind: Type, required: bool| {
            let mut o = ObjectBuilder::new()
                .schema_type(Type::Object)
                .property(name, ObjectBuilder::new().schema_type(kind));
            if required {
                o = o.required(name);
            }
            RefOr::T(Schema::Object(o.build()))
        };
        let one = json_of(merged([
            part("a", Type::String, true),
            part("b", Type::Integer, false),
            part("a", Type::Boolean, false),
        ]));
        assert_eq!(one["properties"]["a"]["type"], "string");
        assert_eq!(one["properties"]["b"]["type"], "integer");
        assert_eq!(one["required"], json!(["a"]));
    }
}
