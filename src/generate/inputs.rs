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

/// `true` when a JPEG's last scan is followed by its end-of-image marker. The image crate's
/// JPEG decoder is lenient and fills a cut-off scan with grey rather than failing, so a
/// truncated upload would otherwise pass as an image. Inside scan data every 0xFF byte is
/// followed by 0x00 or a restart marker, so 0xFF 0xDA (start of scan) and 0xFF 0xD9 (end of
/// image) occur only as markers; comparing the last of each also looks past a complete EXIF
/// thumbnail ahead of a cut-off main image.
fn jpeg_is_complete(bytes: &[u8]) -> bool {
    let last = |marker: u8| bytes.windows(2).rposition(|w| w == [0xff, marker]);
    match (last(0xda), last(0xd9)) {
        (Some(scan), Some(end)) => end > scan,
        _ => false,
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

    if format == ImageFormat::Jpeg && !jpeg_is_complete(bytes) {
        return Err(InputError::Decode("the data is truncated".to_owned()));
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::Mutex;
    use std::time::Instant;

    use axum::body::Body;
    use axum::extract::State;
    use axum::http::{header, StatusCode as Code, Uri};
    use axum::response::{IntoResponse, Response};
    use axum::Router;
    use futures::stream;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use crate::generate::raster;

    const UA: &str = "easel/0.1.0-test";
    /// Development switches on, so the loopback test servers are reachable.
    const OPEN: DestinationPolicy = DestinationPolicy {
        allow_http: true,
        allow_private: true,
    };
    const STRICT: DestinationPolicy = DestinationPolicy {
        allow_http: false,
        allow_private: false,
    };
    /// Small enough that the size tests stay quick.
    const SMALL_MAX_BYTES: u64 = 1000;

    /// A picture whose every pixel differs, so a wrong decode shows.
    fn pattern(width: u32, height: u32) -> image::RgbaImage {
        image::RgbaImage::from_fn(width, height, |x, y| {
            image::Rgba([(x * 7) as u8, (y * 5) as u8, (x + y) as u8, 255])
        })
    }

    fn png_bytes(width: u32, height: u32) -> Vec<u8> {
        let img = pattern(width, height);
        raster::encode_png(&RgbaImage {
            width,
            height,
            data: img.into_raw(),
        })
    }

    fn encode(img: DynamicImage, format: ImageFormat) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, format).unwrap();
        out.into_inner()
    }

    fn jpeg_bytes(width: u32, height: u32) -> Vec<u8> {
        encode(
            DynamicImage::ImageRgba8(pattern(width, height))
                .to_rgb8()
                .into(),
            ImageFormat::Jpeg,
        )
    }

    /// The image crate writes WebP losslessly, so pixels can be compared exactly.
    fn webp_bytes(width: u32, height: u32) -> Vec<u8> {
        encode(
            DynamicImage::ImageRgba8(pattern(width, height)),
            ImageFormat::WebP,
        )
    }

    /// Two frames, red then blue.
    fn gif_bytes(width: u32, height: u32) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut encoder = image::codecs::gif::GifEncoder::new(&mut out);
            let frames = [[255, 0, 0, 255], [0, 0, 255, 255]].map(|color| {
                image::Frame::new(image::RgbaImage::from_pixel(
                    width,
                    height,
                    image::Rgba(color),
                ))
            });
            encoder.encode_frames(frames).unwrap();
        }
        out
    }

    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
            }
        }
        !crc
    }

    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }

    /// A valid PNG header claiming `width` x `height` RGBA pixels, followed by an IDAT of one
    /// zero byte: a few dozen bytes that would need width * height * 4 bytes to decode.
    fn bomb_png(width: u32, height: u32) -> Vec<u8> {
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&width.to_be_bytes());
        ihdr.extend_from_slice(&height.to_be_bytes());
        ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
        chunk(&mut out, b"IHDR", &ihdr);
        // zlib header, one final stored block holding a single 0 byte, Adler-32 of it.
        let idat = [
            0x78, 0x01, 0x01, 0x01, 0x00, 0xfe, 0xff, 0x00, 0x00, 0x01, 0x00, 0x01,
        ];
        chunk(&mut out, b"IDAT", &idat);
        chunk(&mut out, b"IEND", &[]);
        out
    }

    fn noise(len: usize, mut seed: u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    }

    fn limits() -> InputLimits {
        InputLimits {
            timeout: Duration::from_secs(10),
            ..InputLimits::default()
        }
    }

    fn fetcher(limits: InputLimits) -> ImageFetcher {
        ImageFetcher::new(OPEN, limits, UA).unwrap()
    }

    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<String>>>);

    impl Seen {
        fn paths(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    async fn handle(State((seen, addr)): State<(Seen, SocketAddr)>, uri: Uri) -> Response {
        let path = uri.path().to_owned();
        seen.0.lock().unwrap().push(path.clone());
        let image = |bytes: Vec<u8>| (Code::OK, bytes).into_response();
        let redirect = |to: String| (Code::FOUND, [(header::LOCATION, to)]).into_response();
        if let Some(n) = path.strip_prefix("/chain/") {
            // Relative locations, so that resolving them against the current URL is tested too.
            return match n.parse::<u32>().unwrap() {
                0 => image(png_bytes(3, 2)),
                n => redirect(format!("/chain/{}", n - 1)),
            };
        }
        match path.as_str() {
            "/img.png" => image(png_bytes(40, 30)),
            "/img.jpg" => image(jpeg_bytes(40, 30)),
            "/img.webp" => image(webp_bytes(40, 30)),
            "/img.gif" => image(gif_bytes(40, 30)),
            "/moved" => (
                Code::MOVED_PERMANENTLY,
                [(header::LOCATION, format!("http://{addr}/img.png"))],
            )
                .into_response(),
            "/to-metadata" => redirect("http://169.254.169.254/latest/meta-data/".to_owned()),
            "/to-metadata-v6" => redirect("http://[fe80::1]/".to_owned()),
            "/to-metadata-mapped" => redirect("http://[::ffff:169.254.169.254]/".to_owned()),
            "/to-ftp" => redirect(format!("ftp://{addr}/img.png")),
            "/to-file" => redirect("file:///etc/passwd".to_owned()),
            "/no-location" => Code::FOUND.into_response(),
            "/missing" => Code::NOT_FOUND.into_response(),
            "/boom" => Code::INTERNAL_SERVER_ERROR.into_response(),
            "/busy" => Code::TOO_MANY_REQUESTS.into_response(),
            "/exact" => image(vec![b'a'; SMALL_MAX_BYTES as usize]),
            "/big" => image(vec![b'a'; SMALL_MAX_BYTES as usize + 1]),
            "/endless" => {
                // Chunked, no length declared, never ends.
                let chunks =
                    stream::repeat_with(|| Ok::<_, Infallible>(Bytes::from_static(&[b'a'; 100])));
                (Code::OK, Body::from_stream(chunks)).into_response()
            }
            "/trickle" => {
                // A byte now and then, forever: each read is quick, the whole never ends.
                let chunks = stream::unfold((), |()| async {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Some((Ok::<_, Infallible>(Bytes::from_static(b"a")), ()))
                });
                (Code::OK, Body::from_stream(chunks)).into_response()
            }
            _ => Code::NOT_FOUND.into_response(),
        }
    }

    async fn start_server() -> (SocketAddr, Seen) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Seen::default();
        let app = Router::new()
            .fallback(handle)
            .with_state((seen.clone(), addr));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (addr, seen)
    }

    /// A raw server that reads the request, then runs `answer` on the connection.
    async fn raw_server<F, Fut>(answer: F) -> SocketAddr
    where
        F: Fn(tokio::net::TcpStream) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answer = Arc::new(answer);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = stream.read(&mut buf).await;
                    answer(stream).await;
                });
            }
        });
        addr
    }

    fn assert_image(img: &RgbaImage, width: u32, height: u32) {
        assert_eq!((img.width, img.height), (width, height));
        assert_eq!(img.data.len(), width as usize * height as usize * 4);
    }

    #[tokio::test]
    async fn a_png_served_is_fetched_and_decoded() {
        let (addr, seen) = start_server().await;
        let f = fetcher(limits());
        let bytes = f.fetch(&format!("http://{addr}/img.png")).await.unwrap();
        let img = decode(&bytes, &f.limits()).unwrap();
        assert_image(&img, 40, 30);
        assert_eq!(img.data, pattern(40, 30).into_raw());
        assert_eq!(seen.paths(), ["/img.png"]);
    }

    #[tokio::test]
    async fn jpeg_webp_and_gif_are_fetched_and_decoded() {
        let (addr, _seen) = start_server().await;
        let f = fetcher(limits());
        for path in ["/img.jpg", "/img.webp", "/img.gif"] {
            let bytes = f.fetch(&format!("http://{addr}{path}")).await.unwrap();
            let img = decode(&bytes, &f.limits()).unwrap();
            assert_image(&img, 40, 30);
        }
        // Lossless WebP gives the pixels back exactly; JPEG only roughly.
        let webp = decode(&webp_bytes(40, 30), &limits()).unwrap();
        assert_eq!(webp.data, pattern(40, 30).into_raw());
        let jpeg = decode(&jpeg_bytes(40, 30), &limits()).unwrap();
        let want = pattern(40, 30).into_raw();
        let off = jpeg
            .data
            .iter()
            .zip(&want)
            .map(|(a, b)| u64::from(a.abs_diff(*b)))
            .sum::<u64>()
            / want.len() as u64;
        assert!(off < 16, "mean difference {off}");
    }

    #[test]
    fn the_first_frame_of_a_gif_is_used() {
        let img = decode(&gif_bytes(8, 6), &limits()).unwrap();
        assert_image(&img, 8, 6);
        for px in img.data.chunks_exact(4) {
            assert_eq!(px, [255, 0, 0, 255]);
        }
    }

    #[tokio::test]
    async fn three_redirects_are_followed_and_a_fourth_is_refused() {
        let (addr, seen) = start_server().await;
        let f = fetcher(limits());
        let bytes = f.fetch(&format!("http://{addr}/chain/3")).await.unwrap();
        assert_image(&decode(&bytes, &f.limits()).unwrap(), 3, 2);
        assert_eq!(
            seen.paths(),
            ["/chain/3", "/chain/2", "/chain/1", "/chain/0"]
        );

        let err = f
            .fetch(&format!("http://{addr}/chain/4"))
            .await
            .unwrap_err();
        assert!(matches!(err, InputError::TooManyRedirects(3)), "{err:?}");
        assert_eq!(err.to_string(), "more than 3 redirects");
        assert!(!err.is_transient());
        // The fourth redirect's target is never requested.
        assert_eq!(
            seen.paths()[4..],
            ["/chain/4", "/chain/3", "/chain/2", "/chain/1"]
        );

        // An absolute location and a 301 work as well.
        let bytes = f.fetch(&format!("http://{addr}/moved")).await.unwrap();
        assert_image(&decode(&bytes, &f.limits()).unwrap(), 40, 30);
    }

    /// Even with every development switch on, a redirect to a link-local literal (a cloud
    /// metadata endpoint) fails at the check, before any connection: nothing listens at
    /// 169.254.169.254 here, so a connection attempt would end in a different error.
    #[tokio::test]
    async fn a_redirect_to_a_metadata_endpoint_is_refused_without_connecting() {
        let (addr, seen) = start_server().await;
        let f = fetcher(limits());
        for path in ["/to-metadata", "/to-metadata-v6", "/to-metadata-mapped"] {
            let err = f.fetch(&format!("http://{addr}{path}")).await.unwrap_err();
            assert!(matches!(err, InputError::RedirectRefused(_)), "{err:?}");
            assert_eq!(err.to_string(), "redirect to a non-public address refused");
            assert!(!err.is_transient());
        }
        assert_eq!(seen.paths().len(), 3);
    }

    #[tokio::test]
    async fn redirects_to_other_schemes_or_nowhere_are_refused() {
        let (addr, _seen) = start_server().await;
        let f = fetcher(limits());
        for path in ["/to-ftp", "/to-file"] {
            let err = f.fetch(&format!("http://{addr}{path}")).await.unwrap_err();
            assert_eq!(
                err.to_string(),
                "redirect to a URL that is not http or https refused",
                "{path}"
            );
        }
        let err = f
            .fetch(&format!("http://{addr}/no-location"))
            .await
            .unwrap_err();
        assert!(matches!(err, InputError::BadRedirect(302)), "{err:?}");
    }

    /// The production policy cannot reach a loopback test server at all, so its per-hop rule is
    /// checked on the hop check itself, and its submit-time rule on `validate`.
    #[test]
    fn the_production_policy_refuses_http_and_private_hops() {
        let f = ImageFetcher::new(STRICT, limits(), UA).unwrap();
        let hop = |raw: &str| f.check_hop(&Url::parse(raw).unwrap());
        assert_eq!(
            hop("http://example.com/a.png").unwrap_err().to_string(),
            "redirect to a URL that is not https refused"
        );
        for raw in [
            "https://10.0.0.1/a.png",
            "https://127.0.0.1/a.png",
            "https://[::1]/a.png",
            "https://localhost/a.png",
            "https://169.254.169.254/latest/meta-data/",
            "https://[fd00::1]/a.png",
        ] {
            assert_eq!(
                hop(raw).unwrap_err().to_string(),
                "redirect to a non-public address refused",
                "{raw}"
            );
        }
        assert_eq!(
            hop("https://user@example.com/").unwrap_err().to_string(),
            "redirect to an unusable URL (must not contain user info) refused"
        );
        hop("https://example.com/a.png").unwrap();
        hop("https://8.8.8.8/a.png").unwrap();

        assert_eq!(
            f.validate("http://example.com/a.png").unwrap_err(),
            "must be an absolute https URL"
        );
        assert_eq!(
            f.validate("https://192.168.1.1/a.png").unwrap_err(),
            "must not point to a private or reserved address"
        );
        assert_eq!(
            f.validate("https://example.com/a.png").unwrap().as_str(),
            "https://example.com/a.png"
        );
    }

    #[tokio::test]
    async fn the_production_policy_refuses_a_loopback_url_before_fetching() {
        let (addr, seen) = start_server().await;
        let f = ImageFetcher::new(STRICT, limits(), UA).unwrap();
        let port = addr.port();
        for url in [
            format!("http://127.0.0.1:{port}/img.png"),
            format!("https://127.0.0.1:{port}/img.png"),
            format!("https://localhost:{port}/img.png"),
        ] {
            let err = f.fetch(&url).await.unwrap_err();
            assert!(matches!(err, InputError::InvalidUrl(_)), "{url}: {err:?}");
        }
        assert!(seen.paths().is_empty());
    }

    #[test]
    fn link_local_literals_are_refused_even_with_private_allowed() {
        let f = fetcher(limits());
        for raw in [
            "http://169.254.169.254/latest/meta-data/",
            "http://169.254.0.1/",
            "http://2852039166/",
            "http://0xa9.0xfe.0xa9.0xfe/",
            "http://[fe80::1]/",
            "http://[febf::1]/",
            "http://[::ffff:169.254.169.254]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[2002:a9fe:a9fe::1]/",
        ] {
            assert_eq!(
                f.validate(raw).unwrap_err(),
                "must not point to a link-local address",
                "{raw}"
            );
        }
        f.validate("http://127.0.0.1:8080/a.png").unwrap();
        f.validate("http://10.0.0.1/a.png").unwrap();
        f.validate("http://[fd00::1]/a.png").unwrap();
        f.validate("http://169.253.0.1/a.png").unwrap();
    }

    #[test]
    fn dns_answers_lose_link_local_addresses() {
        let addrs: Vec<SocketAddr> = [
            "169.254.169.254:0",
            "[fe80::1]:0",
            "[::ffff:169.254.1.1]:0",
            "127.0.0.1:0",
            "[fd00::1]:0",
            "93.184.216.34:0",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let kept = without_link_local(addrs.into_iter());
        let kept: Vec<String> = kept.iter().map(|a| a.ip().to_string()).collect();
        assert_eq!(kept, ["127.0.0.1", "fd00::1", "93.184.216.34"]);
    }

    #[tokio::test]
    async fn the_resolver_keeps_loopback_when_private_is_allowed() {
        let resolver = InputResolver {
            inner: PublicOnlyResolver::new(true),
        };
        let addrs: Vec<SocketAddr> = resolver
            .resolve("localhost".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()));
        let strict = InputResolver {
            inner: PublicOnlyResolver::new(false),
        };
        let err = match strict.resolve("localhost".parse().unwrap()).await {
            Ok(_) => panic!("localhost resolved under the production policy"),
            Err(err) => err,
        };
        assert!(err.is::<NonPublicDestination>(), "{err}");
    }

    #[tokio::test]
    async fn a_body_over_the_size_limit_is_cut_off() {
        let (addr, _seen) = start_server().await;
        let f = fetcher(InputLimits {
            max_bytes: SMALL_MAX_BYTES,
            ..limits()
        });
        let exact = f.fetch(&format!("http://{addr}/exact")).await.unwrap();
        assert_eq!(exact.len() as u64, SMALL_MAX_BYTES);
        // Declared too long, and chunked without end: both stop at the limit.
        for path in ["/big", "/endless"] {
            let err = f.fetch(&format!("http://{addr}{path}")).await.unwrap_err();
            assert!(
                matches!(err, InputError::TooLarge(SMALL_MAX_BYTES)),
                "{err:?}"
            );
            assert_eq!(err.to_string(), "larger than 1000 bytes");
            assert!(!err.is_transient());
        }
    }

    /// A body without a length or chunking, delimited only by the connection's close, that
    /// never ends: the fetch returns only if reading stops at the limit.
    #[tokio::test]
    async fn an_endless_close_delimited_body_is_cut_off() {
        let addr = raw_server(|mut stream| async move {
            let head = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nConnection: close\r\n\r\n";
            if stream.write_all(head).await.is_err() {
                return;
            }
            let block = [b'a'; 512];
            while stream.write_all(&block).await.is_ok() {}
        })
        .await;
        let f = fetcher(InputLimits {
            max_bytes: SMALL_MAX_BYTES,
            ..limits()
        });
        let err = f.fetch(&format!("http://{addr}/x")).await.unwrap_err();
        assert!(matches!(err, InputError::TooLarge(_)), "{err:?}");
    }

    #[tokio::test]
    async fn a_server_that_never_answers_times_out() {
        let addr = raw_server(|stream| async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(stream);
        })
        .await;
        let timeout = Duration::from_millis(300);
        let f = fetcher(InputLimits {
            timeout,
            ..limits()
        });
        let started = Instant::now();
        let err = f.fetch(&format!("http://{addr}/x")).await.unwrap_err();
        assert!(
            matches!(err, InputError::TimedOut(t) if t == timeout),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "timed out after 300 ms");
        assert!(err.is_transient());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    /// The limit is on the whole fetch, not on each read: a body that trickles in forever
    /// fails by the timeout although every read is quick.
    #[tokio::test]
    async fn a_trickling_body_times_out() {
        let (addr, _seen) = start_server().await;
        let f = fetcher(InputLimits {
            timeout: Duration::from_millis(300),
            ..limits()
        });
        let err = f
            .fetch(&format!("http://{addr}/trickle"))
            .await
            .unwrap_err();
        assert!(matches!(err, InputError::TimedOut(_)), "{err:?}");
    }

    #[tokio::test]
    async fn statuses_and_refusals_are_sorted_transient_or_permanent() {
        let (addr, _seen) = start_server().await;
        let f = fetcher(limits());
        let err = f
            .fetch(&format!("http://{addr}/missing"))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "answered HTTP 404");
        assert!(!err.is_transient());
        for (path, status) in [("/boom", 500), ("/busy", 429)] {
            let err = f.fetch(&format!("http://{addr}{path}")).await.unwrap_err();
            assert_eq!(err.to_string(), format!("answered HTTP {status}"));
            assert!(err.is_transient(), "{status}");
        }

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed = listener.local_addr().unwrap();
        drop(listener);
        let err = f.fetch(&format!("http://{closed}/x")).await.unwrap_err();
        assert_eq!(err.to_string(), "connection refused");
        assert!(err.is_transient());

        let err = f.fetch("not a url").await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid URL: must be an absolute http or https URL"
        );
        assert!(!err.is_transient());
    }

    #[tokio::test]
    async fn a_connection_reset_is_transient() {
        let addr = raw_server(|stream| async move {
            let _ = stream.set_zero_linger();
            drop(stream);
        })
        .await;
        let err = fetcher(limits())
            .fetch(&format!("http://{addr}/x"))
            .await
            .unwrap_err();
        assert!(matches!(err, InputError::Transport { .. }), "{err:?}");
        assert!(err.is_transient(), "{err}");
    }

    /// The header is read and the pixel count refused before any pixel buffer exists: decoding
    /// this would need 100000 * 100000 * 4 bytes.
    #[test]
    fn a_decompression_bomb_fails_on_its_pixel_count() {
        let bomb = bomb_png(100_000, 100_000);
        assert!(bomb.len() < 100);
        let err = decode(&bomb, &limits()).unwrap_err();
        assert!(
            matches!(
                err,
                InputError::TooManyPixels {
                    width: 100_000,
                    height: 100_000,
                    max_pixels: 25_000_000
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "100000x100000 is over the 25 megapixel limit"
        );
        // A side longer than the whole pixel limit, and a small limit, are refused the same way.
        let err = decode(&bomb_png(30_000_000, 1), &limits()).unwrap_err();
        assert!(matches!(err, InputError::TooManyPixels { .. }), "{err:?}");
        let tight = InputLimits {
            max_pixels: 40 * 30 - 1,
            ..limits()
        };
        for bytes in [
            png_bytes(40, 30),
            jpeg_bytes(40, 30),
            webp_bytes(40, 30),
            gif_bytes(40, 30),
        ] {
            let err = decode(&bytes, &tight).unwrap_err();
            assert_eq!(err.to_string(), "40x30 is over the 1199 pixel limit");
        }
    }

    /// A bomb whose pixel count passes still cannot decode from a dozen bytes of data.
    #[test]
    fn a_bomb_within_the_pixel_limit_fails_cleanly() {
        let err = decode(&bomb_png(5000, 5000), &limits()).unwrap_err();
        assert!(matches!(err, InputError::Decode(_)), "{err:?}");
    }

    #[test]
    fn truncated_and_random_bytes_fail_cleanly() {
        assert!(matches!(
            decode(&noise(4096, 1), &limits()),
            Err(InputError::UnsupportedFormat)
        ));
        assert!(matches!(
            decode(&[], &limits()),
            Err(InputError::UnsupportedFormat)
        ));
        assert_eq!(
            InputError::UnsupportedFormat.to_string(),
            "not a PNG, JPEG, WebP or GIF image"
        );
        // Formats the image crate knows but inputs do not take.
        for magic in [&b"BM"[..], b"II*\0", b"qoif", b"P6"] {
            let mut other = magic.to_vec();
            other.extend(noise(100, 3));
            assert!(matches!(
                decode(&other, &limits()),
                Err(InputError::UnsupportedFormat)
            ));
        }

        // Every prefix of every format, and each signature followed by noise, fails with an
        // error (or, for the whole file, decodes): no panic, no hang.
        for (name, bytes) in [
            ("png", png_bytes(12, 10)),
            ("jpeg", jpeg_bytes(12, 10)),
            ("webp", webp_bytes(12, 10)),
            ("gif", gif_bytes(12, 10)),
        ] {
            let whole = decode(&bytes, &limits()).unwrap();
            assert_image(&whole, 12, 10);
            for len in 0..bytes.len() {
                match decode(&bytes[..len], &limits()) {
                    Err(InputError::Decode(_) | InputError::UnsupportedFormat) => {}
                    // Cut only in what follows the pixel data (PNG's IEND, GIF's trailer).
                    Ok(img) if img == whole => {}
                    other => panic!("{name} cut at {len} of {}: {other:?}", bytes.len()),
                }
            }
            for seed in 1..20 {
                let mut corrupt = bytes[..16].to_vec();
                corrupt.extend(noise(2000, seed));
                assert!(decode(&corrupt, &limits()).is_err(), "{name} {seed}");
            }
        }
        let truncated = png_bytes(40, 30);
        let err = decode(&truncated[..truncated.len() / 2], &limits()).unwrap_err();
        assert!(
            err.to_string().starts_with("could not be decoded: "),
            "{err}"
        );
    }

    #[test]
    fn reasons_read_as_documented() {
        let l = InputLimits::default();
        assert_eq!(
            (l.max_bytes, l.max_pixels, l.timeout, l.max_redirects),
            (20 * 1024 * 1024, 25_000_000, Duration::from_secs(30), 3)
        );
        assert_eq!(
            InputError::TooLarge(l.max_bytes).to_string(),
            "larger than 20 MiB"
        );
        assert_eq!(
            InputError::TimedOut(l.timeout).to_string(),
            "timed out after 30 s"
        );
        let err = InputError::TooManyPixels {
            width: 10_000,
            height: 10_000,
            max_pixels: l.max_pixels,
        };
        assert_eq!(
            err.to_string(),
            "10000x10000 is over the 25 megapixel limit"
        );
        assert_eq!(InputError::Status(404).to_string(), "answered HTTP 404");
        assert!(InputError::Status(503).is_transient());
        assert!(InputError::Status(408).is_transient());
        assert!(!InputError::Status(403).is_transient());
        assert!(!InputError::NonPublicHost.is_transient());
    }

    #[test]
    fn new_refuses_bad_arguments() {
        let zero = InputLimits {
            timeout: Duration::ZERO,
            ..limits()
        };
        assert!(ImageFetcher::new(OPEN, zero, UA).is_err());
        assert!(ImageFetcher::new(OPEN, limits(), "easel\n1").is_err());
    }
}
