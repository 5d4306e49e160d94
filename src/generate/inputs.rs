//! STUB until the inputs branch is merged.
#![allow(unused_variables)]
use crate::generate::raster::RgbaImage;
use crate::webhooks::ssrf::DestinationPolicy;
#[derive(Clone, Copy, Debug)]
pub struct InputLimits {
    pub max_bytes: u64,
    pub max_pixels: u64,
    pub timeout: std::time::Duration,
    pub max_redirects: usize,
}
impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_bytes: 20 << 20,
            max_pixels: 25_000_000,
            timeout: std::time::Duration::from_secs(30),
            max_redirects: 3,
        }
    }
}
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{0}")]
    X(String),
}
impl InputError {
    pub fn is_transient(&self) -> bool {
        false
    }
}
#[derive(Clone)]
pub struct ImageFetcher;
impl ImageFetcher {
    pub fn new(
        policy: DestinationPolicy,
        limits: InputLimits,
        user_agent: &str,
    ) -> Result<ImageFetcher, String> {
        Ok(ImageFetcher)
    }
    pub fn validate(&self, raw: &str) -> Result<url::Url, String> {
        url::Url::parse(raw).map_err(|e| e.to_string())
    }
    pub async fn fetch(&self, url: &str) -> Result<bytes::Bytes, InputError> {
        Err(InputError::X("stub".into()))
    }
}
pub fn decode(bytes: &[u8], limits: &InputLimits) -> Result<RgbaImage, InputError> {
    crate::generate::raster::decode_png(bytes).map_err(InputError::X)
}
