//! Outgoing HTTP, shared by webhook deliveries, input images and the model backends: which
//! destinations may be reached ([`destination`], resting on [`address`]), the client that
//! reaches callers' URLs ([`client`]), how a failed request
//! is sorted and told ([`failure`]). How a URL is shown in logs is `config::redact`.

pub mod address;
pub mod client;
pub mod destination;
pub mod failure;
pub mod moderation;
#[cfg(test)]
pub(crate) mod testing;

pub use destination::{
    validate_webhook_url, DestinationPolicy, NonPublicDestination, PublicOnlyResolver,
};
pub use failure::{format_duration, Failure};
