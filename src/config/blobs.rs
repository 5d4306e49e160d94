//! Where the images are kept: the local image folder or an S3-compatible bucket, and the base of
//! the URLs they are served under.

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use super::values::{bytes_or_text, check_http_url, choice};

choice! {
    /// Where the images are kept: `local` (files under `{data_dir}/files`, the default) or `s3`
    /// (an S3-compatible bucket; credentials from the `AWS_*` environment variables only).
    pub enum BlobStoreKind ("blob_store") {
        Local = "local",
        S3 = "s3",
    }
}

/// The blob store settings.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Blobs {
    /// `local` or `s3`.
    #[serde(rename = "blob_store")]
    pub store: BlobStoreKind,
    /// The bucket, with `blob_store = "s3"` (required there).
    pub s3_bucket: Option<String>,
    /// Prepended to every object key (`easel/` keeps the images under `easel/`). Empty by default.
    pub s3_prefix: String,
    /// The S3 API's URL, for S3-compatible servers (MinIO, Ceph, moto...). Default: AWS, or
    /// `AWS_ENDPOINT`. With virtual-hosted-style requests the endpoint names the bucket.
    pub s3_endpoint: Option<String>,
    /// The bucket's region. Default: `AWS_REGION`, else `us-east-1`.
    pub s3_region: Option<String>,
    /// Address the bucket in the path (`{endpoint}/{bucket}/{key}`) rather than the host name;
    /// most self-hosted S3-compatible servers need this.
    pub s3_path_style: bool,
    /// Base URL under which the bucket (or a CDN in front of it) serves the keys directly; image
    /// URLs are then `{blobs_public_url}/{key}`. Default: easel serves them at
    /// `{public_url}/files/{key}`.
    #[serde(rename = "blobs_public_url")]
    pub public_url: Option<String>,
    /// Free space to keep on the filesystem of the image folder (`{data_dir}/files`, beside the
    /// SQLite database) with `blob_store = "local"`: below it workers stop writing images until
    /// space returns, so that the database keeps room for submits, key checks and webhook
    /// records. Not used with `s3`.
    pub min_free_space: FreeSpace,
}

impl Default for Blobs {
    fn default() -> Self {
        Blobs {
            store: BlobStoreKind::Local,
            s3_bucket: None,
            s3_prefix: String::new(),
            s3_endpoint: None,
            s3_region: None,
            s3_path_style: false,
            public_url: None,
            min_free_space: FreeSpace::Bytes(256 << 20),
        }
    }
}

impl Blobs {
    pub fn validate(&self) -> anyhow::Result<()> {
        check_http_url("s3_endpoint", self.s3_endpoint.as_deref())?;
        check_http_url("blobs_public_url", self.public_url.as_deref())?;
        if self.store == BlobStoreKind::S3
            && self
                .s3_bucket
                .as_deref()
                .is_none_or(|b| b.trim().is_empty())
        {
            anyhow::bail!("configuration: s3_bucket is required with blob_store = \"s3\"");
        }
        Ok(())
    }
}

/// A floor of free space: a number of bytes, or a share of the filesystem. Written as a size
/// (`512MiB`, `1GiB`, `2GB`; plain digits are bytes) or a share (`5%`); `0` turns it off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FreeSpace {
    Bytes(u64),
    /// Per cent of the filesystem's size, above 0 and below 100.
    Percent(f64),
}

impl FreeSpace {
    /// `512MiB`, `1GiB`, `2GB`, `1048576` (bytes), `5%`, `0`: a size as
    /// [`parse_size`](super::values::parse_size) reads it, or a share.
    pub fn parse(text: &str) -> Result<FreeSpace, String> {
        let text = text.trim();
        let bad = || {
            format!(
                "`{text}` is neither a size (like 512MiB, 1GiB, 2GB or a number of bytes) nor \
                 a share of the filesystem (like 5%)"
            )
        };
        if let Some(share) = text.strip_suffix('%') {
            let share: f64 = share.trim().parse().map_err(|_| bad())?;
            if !(share.is_finite() && share > 0.0 && share < 100.0) {
                return Err(format!("`{text}`: a share must be above 0% and below 100%"));
            }
            return Ok(FreeSpace::Percent(share));
        }
        super::values::parse_size(text)
            .map(FreeSpace::Bytes)
            .map_err(|_| bad())
    }

    /// The floor in bytes on a filesystem of `total` bytes.
    pub fn bytes_of(&self, total: u64) -> u64 {
        match *self {
            FreeSpace::Bytes(bytes) => bytes,
            FreeSpace::Percent(share) => (total as f64 * share / 100.0) as u64,
        }
    }

    pub fn is_off(&self) -> bool {
        *self == FreeSpace::Bytes(0)
    }
}

impl std::str::FromStr for FreeSpace {
    type Err = String;

    fn from_str(text: &str) -> Result<FreeSpace, String> {
        FreeSpace::parse(text)
    }
}

/// Written back as it is read: bytes as plain digits, a share with `%`.
impl std::fmt::Display for FreeSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FreeSpace::Bytes(bytes) => write!(f, "{bytes}"),
            FreeSpace::Percent(share) => write!(f, "{share}%"),
        }
    }
}

impl Serialize for FreeSpace {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// A size or share as text, or plain digits (bytes) as a number.
impl<'de> Deserialize<'de> for FreeSpace {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FreeSpace, D::Error> {
        match bytes_or_text(d)? {
            Ok(bytes) => Ok(FreeSpace::Bytes(bytes)),
            Err(text) => FreeSpace::parse(&text)
                .map_err(|e| de::Error::custom(format!("min_free_space: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_free_space_takes_sizes_and_shares() {
        let parse = |t: &str| FreeSpace::parse(t);
        assert_eq!(parse("1GiB"), Ok(FreeSpace::Bytes(1 << 30)));
        assert_eq!(parse("512 MiB"), Ok(FreeSpace::Bytes(512 << 20)));
        assert_eq!(parse("2GB"), Ok(FreeSpace::Bytes(2_000_000_000)));
        assert_eq!(parse("1.5gib"), Ok(FreeSpace::Bytes(3 << 29)));
        assert_eq!(parse("4096"), Ok(FreeSpace::Bytes(4096)));
        assert_eq!(parse("0"), Ok(FreeSpace::Bytes(0)));
        assert!(parse("0").unwrap().is_off());
        assert_eq!(parse("5%"), Ok(FreeSpace::Percent(5.0)));
        assert_eq!(parse("5%").unwrap().bytes_of(1000), 50);
        for bad in [
            "", "GiB", "-1GiB", "1 parsec", "0%", "100%", "150%", "x%", "1e400",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        for shown in [FreeSpace::Bytes(268_435_456), FreeSpace::Percent(2.5)] {
            assert_eq!(parse(&shown.to_string()), Ok(shown));
        }
    }
}
