//! What the OpenAPI document says that no one handler owns: its info, server and security
//! scheme; the refusals that many routes answer (`components/responses`), each said once here
//! and named by the routes' `responses(...)`, alone or in the sets below; and the last touches
//! once every route is registered.

use std::collections::BTreeMap;

use utoipa::openapi::header::{Header, HeaderBuilder};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, InfoBuilder, OpenApi, OpenApiBuilder, Ref, RefOr, Server,
};
use utoipa::{IntoResponses, PartialSchema, ToResponse, ToSchema};

use crate::domain::schema::flat;
use crate::http::refusal_response::Errors;

/// The document before any route is registered: who it is, where, how a caller authenticates,
/// and the shared refusals with the schema of their body.
pub fn base() -> OpenApi {
    let mut schemas = vec![(Errors::name().into_owned(), Errors::schema())];
    Errors::schemas(&mut schemas);
    let components = ComponentsBuilder::new()
        .security_scheme(
            "apiKey",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "Authorization",
                "The raw API key, no prefix",
            ))),
        )
        .schemas_from_iter(schemas)
        .responses_from_iter(SHARED.map(|response| response()))
        .build();
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("easel")
                .version("1")
                .description(Some(
                    "A self-hosted image-generation task service. Authenticate with \
                     `Authorization: <API_KEY>` (the raw key, no Bearer prefix). A missing, \
                     malformed, unknown or revoked key is 401 with the body `{}`.",
                )),
        )
        .servers(Some([Server::new("/")]))
        .security(Some([SecurityRequirement::new(
            "apiKey",
            Vec::<String>::new(),
        )]))
        .components(Some(components))
        .build()
}

/// The last touches, once every route is registered: schemas with flattened parts as the one
/// object they serialize to, and summaries (a doc comment's first paragraph) on one line.
pub fn finish(doc: &mut OpenApi) {
    if let Some(components) = doc.components.as_mut() {
        for schema in components.schemas.values_mut() {
            *schema = flat(std::mem::take(schema));
        }
    }
    for item in doc.paths.paths.values_mut() {
        for operation in [&mut item.get, &mut item.post, &mut item.patch]
            .into_iter()
            .flatten()
        {
            if let Some(summary) = operation.summary.as_mut() {
                *summary = summary.replace('\n', " ");
            }
        }
    }
}

/// A shared response: its name in `components/responses`, and what it says.
type Shared = fn() -> (&'static str, RefOr<Response>);

/// Every shared response, for `components/responses`.
const SHARED: [Shared; 8] = [
    Refusal::response,
    NotFound::response,
    Unauthorized::response,
    Retry::response,
    InsufficientCredits::response,
    QuotaExceeded::response,
    IdempotencyKeyInUse::response,
    IdempotencyKeyReused::response,
];

/// A refusal's answer, with `{"errors": [...]}` as its body.
fn refused(description: &str) -> ResponseBuilder {
    ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name(Errors::name())))
            .build(),
    )
}

/// `Retry-After`, in whole seconds.
fn retry_after(description: Option<&str>) -> Header {
    HeaderBuilder::new()
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1)),
        ))
        .description(description)
        .build()
}

/// A header whose value is text.
fn text_header(description: &str) -> Header {
    HeaderBuilder::new()
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .description(Some(description))
        .build()
}

/// The shared responses, each a type that `responses(...)` can name.
macro_rules! shared {
    ($($(#[$doc:meta])* $ty:ident = $name:literal, $response:expr;)*) => {$(
        $(#[$doc])*
        pub struct $ty;

        impl<'r> ToResponse<'r> for $ty {
            fn response() -> (&'r str, RefOr<Response>) {
                ($name, $response.into())
            }
        }
    )*};
}

shared! {
    /// A refusal in the body's words: the request, its body or the task it names.
    Refusal = "Error", refused("Error");
    /// A submit's 404.
    NotFound = "NotFound", refused(
        "The parent task does not exist or belongs to another account (code task_not_found; \
         never says which); upload_not_found: an upload named in an image field is not the \
         caller's, or no longer kept (never says which)",
    );
    /// No live key: 401 with `{}`, which says nothing about the key.
    Unauthorized = "Unauthorized", ResponseBuilder::new()
        .description("Missing, malformed, unknown or revoked key")
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::Object)
                        .max_properties(Some(0)),
                ))
                .build(),
        );
    /// 503: the store or the server, for a moment.
    Retry = "Retry", refused("Try again later").header("Retry-After", retry_after(None));
    InsufficientCredits = "InsufficientCredits", refused(
        "The account's credits do not cover the operation's cost (code insufficient_credits), \
         or its expires_at has passed (code account_expired); nothing was stored",
    );
    QuotaExceeded = "QuotaExceeded", refused(
        "quota_exceeded: the account has its plan's max_pending tasks queued or running, or \
         (an upload, a data: URL) its max_upload_bytes_per_day are used until the next UTC day; \
         rate_limited: the key's or the account's request rate limit is spent (per node; see \
         docs/api.md)",
    )
    .header("Retry-After", retry_after(None))
    .header(
        "RateLimit-Policy",
        text_header(
            "rate_limited only: the policy that refused, as in \
             draft-ietf-httpapi-ratelimit-headers-10, e.g. \"key\";q=50;w=5",
        ),
    )
    .header(
        "RateLimit",
        text_header(
            "rate_limited only: \"key\" or \"account\";r=0;t=<seconds until the next request \
             is allowed>",
        ),
    );
    IdempotencyKeyInUse = "IdempotencyKeyInUse", refused(
        "A submit with the same `Idempotency-Key` is being handled; retry after `Retry-After` \
         seconds (code `idempotency_key_in_use`).",
    )
    .header("Retry-After", retry_after(Some("Seconds to wait before retrying (1).")));
    IdempotencyKeyReused = "IdempotencyKeyReused", refused(
        "The `Idempotency-Key` was used for another request (another operation or body) within \
         its time to live (code `idempotency_key_reused`).",
    );
}

/// A reference to the shared response `T`.
fn reference<T: ToResponse<'static>>() -> RefOr<Response> {
    Ref::from_response_name(T::response().0).into()
}

/// Sets of shared responses that routes answer together: other sets', and their own by status.
macro_rules! sets {
    ($($(#[$doc:meta])* $ty:ident: [$($set:ty),*] $($status:literal => $response:ty),*;)*) => {$(
        $(#[$doc])*
        pub struct $ty;

        impl IntoResponses for $ty {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                let mut responses = BTreeMap::new();
                $(responses.extend(<$set as IntoResponses>::responses());)*
                // A set's own answer to a status wins over an included set's.
                responses.extend([$(($status.to_string(), reference::<$response>())),*]);
                responses
            }
        }
    )*};
}

sets! {
    /// What any request with a key may be answered: no live key, a limit, a moment's outage.
    Keyed: [] "401" => Unauthorized, "429" => QuotaExceeded, "503" => Retry;
    /// A request with a key and something of its own to check (a query, a path, a body).
    Checked: [Keyed] "400" => Refusal;
    /// A request that names one of the caller's tasks: no such task of the caller's is 404.
    OneTask: [Checked] "404" => Refusal;
    /// A task in a state that does not allow it.
    Conflict: [] "409" => Refusal;
    /// A request with a body: over its limit, or not of a type the route takes.
    Posted: [Checked] "413" => Refusal, "415" => Refusal;
    /// An operator's request (an admin key): anyone else's is 404, as for no such route.
    Operator: [Posted] "404" => Refusal;
    /// What only a submit may be answered: its cost, its parent or images, its idempotency key.
    SubmitRefused: [Posted] "402" => InsufficientCredits, "404" => NotFound,
        "409" => IdempotencyKeyInUse, "422" => IdempotencyKeyReused;
}

/// The header that says a wait was applied, on a submit's answer.
pub fn preference_applied() -> Header {
    text_header("`wait=N` when the request asked to wait (`Prefer: wait`).")
}

/// The header on a replayed answer.
pub fn idempotent_replayed() -> Header {
    HeaderBuilder::new()
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["true"])),
        ))
        .description(Some(
            "`true` on an answer replayed for a repeated `Idempotency-Key`; absent otherwise.",
        ))
        .build()
}
