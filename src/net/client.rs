//! The HTTP client for callers' destinations (webhook URLs, input image URLs): one set of
//! settings, so that what keeps a caller's URL from reaching easel's own network is written once.

use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::Resolve;
use reqwest::header::HeaderValue;
use reqwest::{redirect, ClientBuilder};

use super::destination::DestinationPolicy;

/// A client builder for `what`'s requests ("webhook", "input image"): rustls, no redirects
/// followed by reqwest (a caller that follows them checks each hop), no referer, no proxies
/// from the environment, https only unless the policy allows http, names resolved by
/// `resolver`, and `timeout` both to connect and for the whole request. `Err` says which
/// argument is unusable.
pub fn callers_client(
    what: &str,
    policy: DestinationPolicy,
    resolver: impl Resolve + 'static,
    timeout: Duration,
    user_agent: &str,
) -> Result<ClientBuilder, String> {
    if timeout.is_zero() {
        return Err(format!("{what} timeout must be greater than zero"));
    }
    let user_agent = HeaderValue::from_str(user_agent)
        .map_err(|_| format!("{what} user agent is not a valid header value"))?;
    Ok(reqwest::Client::builder()
        .use_rustls_tls()
        .redirect(redirect::Policy::none())
        .referer(false)
        .no_proxy()
        .https_only(!policy.allow_http)
        .dns_resolver(Arc::new(resolver))
        .connect_timeout(timeout)
        .timeout(timeout)
        .user_agent(user_agent))
}
