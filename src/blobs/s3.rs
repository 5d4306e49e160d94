//! Blobs as objects in an S3-compatible bucket (AWS S3, MinIO, Ceph, moto...), through
//! `object_store`. Each key is an object name, below `s3_prefix` when one is set.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{
    Attribute, Attributes, ClientConfigKey, ObjectStore, ObjectStoreExt, PutOptions, PutPayload,
    RetryConfig,
};

use super::store::{content_type_of, BlobError, BlobStore};

#[derive(Debug)]
pub(super) struct S3 {
    store: Arc<dyn ObjectStore>,
}

impl S3 {
    /// Credentials and anything not set in easel's configuration come from the usual `AWS_*`
    /// variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
    /// `AWS_REGION`, `AWS_ENDPOINT`...) or the instance's role; easel's settings win over them.
    /// Builds the client only: nothing is contacted, so start does not depend on the bucket.
    pub(super) fn new(config: &crate::config::Blobs) -> anyhow::Result<S3> {
        let bucket = config
            .s3_bucket
            .as_deref()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| {
                anyhow::anyhow!("configuration: s3_bucket is required with blob_store = \"s3\"")
            })?;
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_virtual_hosted_style_request(!config.s3_path_style)
            // Bounded so that a dead store fails a request in seconds, not minutes: a client
            // waits on `/files`, and a worker holds its task meanwhile. 5xx, throttling and
            // connection errors are retried within these bounds.
            .with_retry(RetryConfig {
                max_retries: 3,
                retry_timeout: Duration::from_secs(15),
                ..RetryConfig::default()
            })
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                "5s",
            )
            .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), "30s");
        if let Some(region) = &config.s3_region {
            builder = builder.with_region(region);
        }
        if let Some(endpoint) = &config.s3_endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        let endpoint = builder.get_config_value(&AmazonS3ConfigKey::Endpoint);
        if endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"))
        {
            builder = builder.with_allow_http(true);
        }
        let s3 = builder
            .build()
            .map_err(|e| anyhow::anyhow!("configuration: the S3 blob store: {e}"))?;
        tracing::info!(
            bucket,
            prefix = config.s3_prefix,
            endpoint = endpoint.as_deref().unwrap_or("AWS"),
            "images are kept in S3-compatible storage"
        );
        let prefix = config.s3_prefix.trim_matches('/');
        let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
            Arc::new(s3)
        } else {
            let prefix = Path::parse(prefix)
                .map_err(|e| anyhow::anyhow!("configuration: s3_prefix: {e}"))?;
            Arc::new(PrefixStore::new(s3, prefix))
        };
        Ok(S3 { store })
    }
}

#[async_trait]
impl BlobStore for S3 {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), BlobError> {
        // Served as they are when `blobs_public_url` points at the bucket: a task's PNG or an
        // upload in its own format, never changing.
        let mut attributes = Attributes::new();
        attributes.insert(Attribute::ContentType, content_type_of(key).into());
        attributes.insert(
            Attribute::CacheControl,
            "public, max-age=31536000, immutable".into(),
        );
        let options = PutOptions {
            attributes,
            ..PutOptions::default()
        };
        self.store
            .put_opts(&path(key)?, PutPayload::from(bytes), options)
            .await
            .map(|_| ())
            .map_err(object_store_error)
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, BlobError> {
        let got = match self.store.get(&path(key)?).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(object_store_error(e)),
        };
        got.bytes().await.map(Some).map_err(object_store_error)
    }

    async fn delete(&self, key: &str) -> Result<(), BlobError> {
        match self.store.delete(&path(key)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(object_store_error(e)),
        }
    }

    async fn list_old(
        &self,
        before: std::time::SystemTime,
        limit: usize,
    ) -> Result<Vec<String>, BlobError> {
        let before: chrono::DateTime<chrono::Utc> = before.into();
        self.store
            .list(None)
            .take(limit)
            .try_filter_map(|meta| async move {
                Ok((meta.last_modified < before).then(|| meta.location.to_string()))
            })
            .try_collect()
            .await
            .map_err(object_store_error)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, BlobError> {
        // `list` matches whole path segments: `t/abc` lists `t/abc/...`, never `t/abcd/...`.
        self.store
            .list(Some(&path(prefix)?))
            .map_ok(|meta| meta.location.to_string())
            .try_collect()
            .await
            .map_err(object_store_error)
    }
}

fn path(key: &str) -> Result<Path, BlobError> {
    Path::parse(key).map_err(|e| BlobError::Permanent(e.into()))
}

/// Sort an object_store error. Requests object_store gave up on after its retries (server
/// errors, throttling, timeouts, refused connections) are transient; a refusal of the request
/// itself (credentials, permissions, a missing bucket, another 4xx) is permanent.
fn object_store_error(e: object_store::Error) -> BlobError {
    use object_store::Error as E;
    let transient = match &e {
        E::Generic { .. } | E::JoinError { .. } => !client_error_status(&e),
        _ => false,
    };
    if transient {
        BlobError::Transient(e.into())
    } else {
        BlobError::Permanent(e.into())
    }
}

/// Whether the error's chain reports a 4xx answer other than 408 and 429. object_store does not
/// export its retry error type, whose status would say it, so its message is read instead.
fn client_error_status(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if let Some(at) = text.find("status code: ") {
            let code: String = text[at + 13..].chars().take(3).collect();
            if let Ok(code) = code.parse::<u16>() {
                return (400..500).contains(&code) && code != 408 && code != 429;
            }
        }
        next = err.source();
    }
    false
}
