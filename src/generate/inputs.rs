//! Callers' input images (blend, describe, upscale-highres): fetched by URL when the task runs
//! and decoded, all of it treated as hostile input.
//!
//! Fetching reuses the webhook SSRF defence ([`crate::webhooks::ssrf`]): the URL is checked with
//! [`validate_webhook_url`] under the same [`DestinationPolicy`], DNS answers go through
//! [`PublicOnlyResolver`], and redirects are followed by hand (the client itself follows none)
//! so that every hop is checked again. Input fetches add one rule of their own: link-local
//! addresses (169.254.0.0/16, fe80::/10, where cloud metadata endpoints live) are refused even
//! when the development switch `allow_private` is on, as IP literals and in DNS answers.
//!
//! Decoding sniffs the format from the bytes, reads the dimensions from the header and checks
//! them before any pixel buffer exists, and sets [`image::Limits`] as a second guard.

use std::error::Error as StdError;
use std::fmt;
use std::io::{self, Cursor};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderValue, ACCEPT, LOCATION};
use reqwest::{redirect, StatusCode};
use url::{Host, Url};

use crate::generate::raster::RgbaImage;
use crate::webhooks::ssrf::{
    validate_webhook_url, DestinationPolicy, NonPublicDestination, PublicOnlyResolver,
};

const MIB: u64 = 1024 * 1024;

/// Decoding may allocate this many bytes per pixel of the (already checked) image: the decoded
/// buffer at up to 16 bits per channel, plus the decoders' working buffers.
const ALLOC_BYTES_PER_PIXEL: u64 = 16;

/// Limits on one input image.
#[derive(Clone, Copy, Debug)]
pub struct InputLimits {
    /// Most body bytes read; the fetch fails as soon as the body passes it.
    pub max_bytes: u64,
    /// Most pixels (width x height) decoded.
    pub max_pixels: u64,
    /// Limit for the whole fetch, redirects and body included.
    pub timeout: Duration,
    /// Most redirects followed.
    pub max_redirects: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_bytes: 20 * MIB,
            max_pixels: 25_000_000,
            timeout: Duration::from_secs(30),
            max_redirects: 3,
        }
    }
}

/// Why an input image could not be used. `Display` gives a short lowercase reason without the
/// input's name (the caller adds which input it was).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The URL breaks the destination policy (checked before any network access).
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    /// A redirect led somewhere the policy forbids; the text says where, e.g. "to a
    /// non-public address".
    #[error("redirect {0} refused")]
    RedirectRefused(String),
    /// More redirects than `max_redirects`.
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    /// A redirect status without a usable `Location` header.
    #[error("redirect (HTTP {0}) without a usable location")]
    BadRedirect(u16),
    /// The host's name resolves only to addresses the policy forbids.
    #[error("host resolves only to non-public addresses")]
    NonPublicHost,
    /// The server answered with a status other than 2xx (or a redirect that is followed).
    #[error("answered HTTP {0}")]
    Status(u16),
    /// The whole fetch did not finish within the limit.
    #[error("timed out after {}", format_duration(*.0))]
    TimedOut(Duration),
    /// The connection or the exchange failed.
    #[error("{reason}")]
    Transport { reason: String, transient: bool },
    /// The body is larger than `max_bytes`.
    #[error("larger than {}", format_bytes(*.0))]
    TooLarge(u64),
    /// The image has more pixels than `max_pixels`.
    #[error("{width}x{height} is over the {} limit", format_pixels(*.max_pixels))]
    TooManyPixels {
        width: u32,
        height: u32,
        max_pixels: u64,
    },
    /// The bytes are not a PNG, JPEG, WebP or GIF image.
    #[error("not a PNG, JPEG, WebP or GIF image")]
    UnsupportedFormat,
    /// The bytes look like a supported format but are truncated, corrupt or unusable.
    #[error("could not be decoded: {0}")]
    Decode(String),
}

impl InputError {
    /// `true` when trying again later may succeed: timeouts, connections refused, reset or
    /// closed early, 5xx, 429 and 408. Everything else (the URL, the policy, the size, the
    /// content, other 4xx) fails the same way every time.
    pub fn is_transient(&self) -> bool {
        match self {
            InputError::TimedOut(_) => true,
            InputError::Transport { transient, .. } => *transient,
            InputError::Status(status) => *status >= 500 || *status == 429 || *status == 408,
            _ => false,
        }
    }
}

fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else if d.subsec_nanos() % 1_000_000 == 0 {
        format!("{} ms", d.as_millis())
    } else {
        format!("{d:?}")
    }
}

fn format_bytes(n: u64) -> String {
    if n >= MIB && n % MIB == 0 {
        format!("{} MiB", n / MIB)
    } else if n >= 1024 && n % 1024 == 0 {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} bytes")
    }
}

fn format_pixels(n: u64) -> String {
    if n >= 1_000_000 && n % 1_000_000 == 0 {
        format!("{} megapixel", n / 1_000_000)
    } else {
        format!("{n} pixel")
    }
}

/// `true` for link-local addresses (169.254.0.0/16, fe80::/10), also when embedded in an
/// IPv4-mapped, IPv4-compatible, NAT64 or 6to4 IPv6 address, each of which can lead to the
/// IPv4 address.
fn is_link_local(ip: IpAddr) -> bool {
    fn v4(ip: std::net::Ipv4Addr) -> bool {
        let [a, b, _, _] = ip.octets();
        a == 169 && b == 254
    }
    match ip {
        IpAddr::V4(ip) => v4(ip),
        IpAddr::V6(ip) => {
            let s = ip.segments();
            let embedded = |hi: u16, lo: u16| {
                let [a, b] = hi.to_be_bytes();
                let [c, d] = lo.to_be_bytes();
                v4(std::net::Ipv4Addr::new(a, b, c, d))
            };
            let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|&x| x == 0);
            (s[0] & 0xffc0) == 0xfe80
                || ip.to_ipv4().is_some_and(v4)
                || (nat64 && embedded(s[6], s[7]))
                || (s[0] == 0x2002 && embedded(s[1], s[2]))
        }
    }
}

/// A name that resolved only to link-local addresses.
#[derive(Debug)]
struct LinkLocalDestination {
    host: String,
}

impl fmt::Display for LinkLocalDestination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "host {} resolves only to link-local addresses",
            self.host
        )
    }
}

impl StdError for LinkLocalDestination {}

/// The webhook resolver, then link-local addresses dropped whatever the policy: with
/// `allow_private` off the inner resolver has dropped them already, with it on this is what
/// keeps a name that resolves to a metadata endpoint out of reach.
#[derive(Clone, Copy, Debug)]
struct InputResolver {
    inner: PublicOnlyResolver,
}

fn without_link_local(addrs: impl Iterator<Item = SocketAddr>) -> Vec<SocketAddr> {
    addrs.filter(|addr| !is_link_local(addr.ip())).collect()
}

impl Resolve for InputResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let answers = self.inner.resolve(name);
        Box::pin(async move {
            let kept = without_link_local(answers.await?);
            if kept.is_empty() {
                return Err(Box::new(LinkLocalDestination { host }) as _);
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// A client for input images; cheap to clone (clones share one connection pool).
#[derive(Clone)]
pub struct ImageFetcher {
    inner: Arc<Fetcher>,
}

struct Fetcher {
    http: reqwest::Client,
    policy: DestinationPolicy,
    limits: InputLimits,
}

impl fmt::Debug for ImageFetcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImageFetcher")
            .field("policy", &self.inner.policy)
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

impl ImageFetcher {
    /// Build the shared HTTP client: no redirects followed by reqwest (they are followed and
    /// checked here), no proxies from the environment, https only unless `allow_http`, and DNS
    /// answers filtered by [`PublicOnlyResolver`] and the link-local rule.
    pub fn new(
        policy: DestinationPolicy,
        limits: InputLimits,
        user_agent: &str,
    ) -> Result<ImageFetcher, String> {
        if limits.timeout.is_zero() {
            return Err("input image timeout must be greater than zero".to_owned());
        }
        let user_agent = HeaderValue::from_str(user_agent)
            .map_err(|_| "input image user agent is not a valid header value".to_owned())?;
        let resolver = InputResolver {
            inner: PublicOnlyResolver::new(policy.allow_private),
        };
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .redirect(redirect::Policy::none())
            .referer(false)
            .no_proxy()
            .https_only(!policy.allow_http)
            .dns_resolver(Arc::new(resolver))
            .connect_timeout(limits.timeout)
            .timeout(limits.timeout)
            .user_agent(user_agent)
            .build()
            .map_err(|e| format!("failed to build input image HTTP client: {e}"))?;
        Ok(ImageFetcher {
            inner: Arc::new(Fetcher {
                http,
                policy,
                limits,
            }),
        })
    }

    /// The limits this fetcher applies.
    pub fn limits(&self) -> InputLimits {
        self.inner.limits
    }

    /// Check a URL at submit time without network access: scheme per policy, host, length,
    /// user info, IP-literal hosts (link-local ones always refused). Returns the parsed URL or
    /// a short lowercase reason without the field's name, like [`validate_webhook_url`].
    pub fn validate(&self, raw: &str) -> Result<Url, String> {
        let url = validate_webhook_url(raw, &self.inner.policy)?;
        let literal = match url.host() {
            Some(Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if literal.is_some_and(is_link_local) {
            return Err("must not point to a link-local address".to_owned());
        }
        Ok(url)
    }

    /// Fetch the bytes at `url` under the policy and limits: at most `max_redirects` redirects,
    /// each checked again; the whole fetch within `timeout`; at most `max_bytes` read.
    pub async fn fetch(&self, url: &str) -> Result<Bytes, InputError> {
        let url = self.validate(url).map_err(InputError::InvalidUrl)?;
        let timeout = self.inner.limits.timeout;
        match tokio::time::timeout(timeout, self.fetch_from(url)).await {
            Ok(result) => result,
            Err(_elapsed) => Err(InputError::TimedOut(timeout)),
        }
    }

    /// The fetch of a URL that passed [`ImageFetcher::validate`].
    async fn fetch_from(&self, mut url: Url) -> Result<Bytes, InputError> {
        let limits = self.inner.limits;
        let mut redirects = 0;
        loop {
            let response = self
                .inner
                .http
                .get(url.clone())
                .header(
                    ACCEPT,
                    HeaderValue::from_static("image/png, image/jpeg, image/webp, image/gif"),
                )
                .send()
                .await
                .map_err(|e| transport_error(&e, limits.timeout))?;
            let status = response.status();
            if is_followed_redirect(status) {
                if redirects == limits.max_redirects {
                    return Err(InputError::TooManyRedirects(limits.max_redirects));
                }
                let next = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|value| value.to_str().ok())
                    .and_then(|location| url.join(location).ok())
                    .ok_or(InputError::BadRedirect(status.as_u16()))?;
                url = self.check_hop(&next)?;
                redirects += 1;
                continue;
            }
            if !status.is_success() {
                return Err(InputError::Status(status.as_u16()));
            }
            return read_body(response, limits).await;
        }
    }

    /// A redirect target checked as a caller's URL would be, the refusal worded for a hop.
    fn check_hop(&self, target: &Url) -> Result<Url, InputError> {
        let policy = self.inner.policy;
        let scheme_ok = match target.scheme() {
            "https" => true,
            "http" => policy.allow_http,
            _ => false,
        };
        if !scheme_ok {
            let to = if policy.allow_http {
                "to a URL that is not http or https"
            } else {
                "to a URL that is not https"
            };
            return Err(InputError::RedirectRefused(to.to_owned()));
        }
        self.validate(target.as_str()).map_err(|reason| {
            if reason.starts_with("must not point to") {
                InputError::RedirectRefused("to a non-public address".to_owned())
            } else {
                InputError::RedirectRefused(format!("to an unusable URL ({reason})"))
            }
        })
    }
}

/// The redirect statuses that carry a new location for the same GET. 300 (a choice), 304 (no
/// conditional request was made) and 305/306 are not followed and fail as statuses.
fn is_followed_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// Read the body, failing as soon as it passes `max_bytes`: a declared `Content-Length` over
/// the limit fails before reading, and an undeclared or chunked body is counted as it arrives.
async fn read_body(response: reqwest::Response, limits: InputLimits) -> Result<Bytes, InputError> {
    if response
        .content_length()
        .is_some_and(|len| len > limits.max_bytes)
    {
        return Err(InputError::TooLarge(limits.max_bytes));
    }
    // The declared length sizes the buffer only up to the limit, so a lie costs nothing.
    let capacity = response
        .content_length()
        .unwrap_or(0)
        .min(limits.max_bytes)
        .min(usize::MAX as u64) as usize;
    let mut body = BytesMut::with_capacity(capacity);
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| transport_error(&e, limits.timeout))?;
        if body.len() as u64 + chunk.len() as u64 > limits.max_bytes {
            return Err(InputError::TooLarge(limits.max_bytes));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Errors below reqwest's own (whose text includes the URL), outermost first.
fn sources<'a>(err: &'a reqwest::Error) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(err.source(), |&e| e.source())
}

/// Sort a transport failure into a short reason and whether it may pass if tried again.
fn transport_error(err: &reqwest::Error, timeout: Duration) -> InputError {
    if sources(err).any(|e| e.is::<NonPublicDestination>() || e.is::<LinkLocalDestination>()) {
        return InputError::NonPublicHost;
    }
    if err.is_timeout() {
        return InputError::TimedOut(timeout);
    }
    let mut kinds = Vec::new();
    for e in sources(err) {
        // An io::Error may wrap another, which its source() skips.
        let mut current = e.downcast_ref::<io::Error>();
        while let Some(io_err) = current {
            kinds.push(io_err.kind());
            current = io_err.get_ref().and_then(|e| e.downcast_ref::<io::Error>());
        }
    }
    let transient = |reason: &str| InputError::Transport {
        reason: reason.to_owned(),
        transient: true,
    };
    for kind in &kinds {
        match kind {
            io::ErrorKind::TimedOut => return InputError::TimedOut(timeout),
            io::ErrorKind::ConnectionRefused => return transient("connection refused"),
            io::ErrorKind::ConnectionReset => return transient("connection reset by peer"),
            io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof => return transient("connection closed early"),
            _ => {}
        }
    }
    let detail = sources(err)
        .last()
        .map(|e| e.to_string())
        .unwrap_or_else(|| err.to_string());
    let messages: Vec<String> = sources(err).map(|e| e.to_string().to_lowercase()).collect();
    let mentions = |needle: &str| messages.iter().any(|m| m.contains(needle));
    if mentions("dns error") || mentions("failed to lookup address") {
        // Mostly a name that does not exist; a resolver's passing failure looks the same.
        return InputError::Transport {
            reason: format!("dns resolution failed: {detail}"),
            transient: false,
        };
    }
    if mentions("connection closed before message completed") {
        return transient("connection closed early");
    }
    if err.is_connect() {
        let tls = ["tls", "certificate", "handshake", "alert"]
            .iter()
            .any(|needle| mentions(needle));
        return if tls {
            InputError::Transport {
                reason: format!("tls error: {detail}"),
                transient: false,
            }
        } else {
            InputError::Transport {
                reason: format!("connection failed: {detail}"),
                transient: true,
            }
        };
    }
    if err.is_body() || err.is_decode() {
        return InputError::Transport {
            reason: format!("error reading the body: {detail}"),
            transient: true,
        };
    }
    InputError::Transport {
        reason: format!("request failed: {detail}"),
        transient: false,
    }
}

/// Decode image bytes (PNG, JPEG, WebP, GIF first frame) into straight RGBA8 under `limits`.
///
/// The format is sniffed from the bytes; the dimensions are read from the header and checked
/// against `max_pixels` before any pixel buffer is allocated, and [`image::Limits`] bound the
/// decoders as a second guard. Truncated or corrupt data gives an [`InputError`], never a
/// panic. CPU work: run it on a blocking thread.
pub fn decode(bytes: &[u8], limits: &InputLimits) -> Result<RgbaImage, InputError> {
    let format = match image::guess_format(bytes) {
        Ok(
            format @ (ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP | ImageFormat::Gif),
        ) => format,
        _ => return Err(InputError::UnsupportedFormat),
    };
    // The decoders are third-party code fed hostile bytes: a panic in one is a bad image, not
    // a crashed worker thread.
    match std::panic::catch_unwind(|| decode_as(bytes, format, limits)) {
        Ok(result) => result,
        Err(_) => Err(InputError::Decode("the decoder failed".to_owned())),
    }
}

fn decode_as(
    bytes: &[u8],
    format: ImageFormat,
    limits: &InputLimits,
) -> Result<RgbaImage, InputError> {
    let max_alloc = limits.max_pixels.saturating_mul(ALLOC_BYTES_PER_PIXEL);
    // Reading the header allocates little (the PNG decoder's own buffers are bounded by
    // max_alloc); no side limit yet, so that an oversized image is reported by its size.
    let mut header_limits = image::Limits::default();
    header_limits.max_image_width = None;
    header_limits.max_image_height = None;
    header_limits.max_alloc = Some(max_alloc);
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(header_limits);
    let mut decoder = reader.into_decoder().map_err(decode_error)?;

    let (width, height) = decoder.dimensions();
    if u64::from(width) * u64::from(height) > limits.max_pixels {
        return Err(InputError::TooManyPixels {
            width,
            height,
            max_pixels: limits.max_pixels,
        });
    }
    if width == 0 || height == 0 {
        return Err(InputError::Decode(format!(
            "{width}x{height} has no pixels"
        )));
    }

    // The second guard: no side longer than the pixel limit allows, and the decoded buffer
    // plus the decoders' working memory within max_alloc.
    let side = u32::try_from(limits.max_pixels).unwrap_or(u32::MAX);
    let mut full = image::Limits::default();
    full.max_image_width = Some(side);
    full.max_image_height = Some(side);
    full.max_alloc = Some(max_alloc);
    full.reserve(decoder.total_bytes()).map_err(decode_error)?;
    decoder.set_limits(full).map_err(decode_error)?;

    let rgba = DynamicImage::from_decoder(decoder)
        .map_err(decode_error)?
        .into_rgba8();
    Ok(RgbaImage {
        width,
        height,
        data: rgba.into_raw(),
    })
}

fn decode_error(err: image::ImageError) -> InputError {
    match err {
        image::ImageError::Unsupported(e) => InputError::Decode(format!("unsupported: {e}")),
        image::ImageError::Limits(e) => InputError::Decode(format!("over a decoding limit: {e}")),
        image::ImageError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            InputError::Decode("the data is truncated".to_owned())
        }
        other => InputError::Decode(other.to_string()),
    }
}
