//! How long a finished task's images are kept, and how often expired ones are looked for.

use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use super::values::duration;

/// The shortest `retention` a setting may give.
pub const RETENTION_MIN: Duration = Duration::from_secs(60);

/// The retention settings.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Retention {
    /// How long a task's images (and the record's links to them) are kept after the task became
    /// final: a duration of at least 1 minute (`30days`, `12h`), or `forever` (`None`, the
    /// default), which removes nothing. Past it, worker nodes delete the files from the blob
    /// store and the record says `data_removed`; the record itself stays.
    #[serde(rename = "retention", with = "keep")]
    pub keep: Option<Duration>,
    /// How often a worker node looks for tasks whose data has expired (with `retention` set).
    #[serde(rename = "retention_sweep_interval", with = "duration")]
    pub sweep_interval: Duration,
    /// How long a caller's upload (and an image given inline as a `data:` URL) is kept, from
    /// when it arrived; the sweep then deletes its file and row.
    #[serde(with = "duration")]
    pub upload_retention: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep: None,
            sweep_interval: Duration::from_secs(60),
            upload_retention: Duration::from_secs(24 * 3600),
        }
    }
}

impl Retention {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.keep.is_some_and(|r| r.is_zero()) || self.sweep_interval.is_zero() {
            anyhow::bail!("configuration: retention and retention_sweep_interval must be non-zero");
        }
        if self.upload_retention.is_zero() {
            anyhow::bail!("configuration: upload_retention must be non-zero");
        }
        Ok(())
    }
}

/// `retention`: `forever` (None), or a duration of at least [`RETENTION_MIN`] given as for
/// [`duration`]. The least is checked here, where a person's setting is read, so that tests may
/// build a `Config` with a shorter one.
mod keep {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => duration::serialize(d, s),
            None => s.serialize_str("forever"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(u64),
            Text(String),
        }
        let retention = match Raw::deserialize(d)? {
            Raw::Secs(s) => Duration::from_secs(s),
            Raw::Text(t) if matches!(t.trim(), "forever" | "") => return Ok(None),
            Raw::Text(t) => duration::parse(&t)
                .map_err(|e| de::Error::custom(format!("retention: {e}; or `forever`")))?,
        };
        if retention < RETENTION_MIN {
            return Err(de::Error::custom(
                "retention must be at least 1 minute, or `forever`",
            ));
        }
        Ok(Some(retention))
    }
}
