//! Outgoing HTTP, shared by webhook deliveries, input images and the model backends: which
//! destinations may be reached ([`destination`], resting on [`address`]), how a failed request
//! is sorted and told ([`failure`]), and how a URL is shown in logs ([`redact`]).

pub mod address;
pub mod destination;
pub mod failure;

pub use destination::{
    validate_webhook_url, DestinationPolicy, NonPublicDestination, PublicOnlyResolver,
};
pub use failure::{format_duration, Failure};

/// `url` with any password replaced by `***`, for logs and errors.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_logs() {
        assert_eq!(
            redact("postgres://easel:hunter2@db:5432/easel"),
            "postgres://easel:***@db:5432/easel"
        );
        assert_eq!(redact("postgres://db/easel"), "postgres://db/easel");
    }
}
