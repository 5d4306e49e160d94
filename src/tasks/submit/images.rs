//! A submit's image fields once the body has passed its checks: an upload named by its URL must
//! be the caller's own, and a `data:` URL is checked by its content and kept as an upload, its
//! field then holding the upload's easel URL (what the record shows and the worker reads).

use bytes::Bytes;

use super::super::upload::discard;
use super::super::upload::inline::{decode_data_url, is_data_url};
use super::super::upload::{admit, check_image, check_owned, keep_upload, upload_account};
use super::super::Tasks;
use super::draft::Draft;
use crate::auth::{look_up, PresentedKey};
use crate::refusal::ApiError;
use crate::store::Upload;

impl Draft {
    /// Every image URL of the body, with its field's name.
    fn image_slots(&mut self) -> Vec<(String, &mut String)> {
        let mut slots: Vec<(String, &mut String)> = Vec::new();
        if let Some(url) = self.image_url.as_mut() {
            slots.push(("image_url".into(), url));
        }
        for (i, url) in self.image_urls.iter_mut().enumerate() {
            slots.push((format!("image_urls[{i}]"), url));
        }
        for (i, url) in self.image_prompts.iter_mut().enumerate() {
            slots.push((format!("image_prompts[{i}]"), url));
        }
        // `--sref`, `--cref`, `--oref` images take the same rules.
        slots.extend(self.extras.parameters.references_mut());
        slots
    }

    /// Check the uploads the body names and keep its `data:` URLs as uploads of `key`'s account
    /// (all checked before any is kept, so that a refusal stores nothing). The uploads kept,
    /// which the caller discards if the submit goes no further.
    pub(super) async fn take_images(
        &mut self,
        tasks: &Tasks,
        key: &PresentedKey,
    ) -> Result<Vec<Upload>, ApiError> {
        let blobs = tasks.blobs.clone();
        let mut slots = self.image_slots();
        let names_upload = |url: &str| {
            blobs
                .key_of_url(url)
                .is_some_and(|k| upload_account(&k).is_some())
        };
        if !slots
            .iter()
            .any(|(_, url)| is_data_url(url) || names_upload(url))
        {
            return Ok(Vec::new());
        }
        // Only a live key learns anything of uploads.
        let account = look_up(tasks.store.as_ref(), &key.0).await?.account.id;
        let mut inline = Vec::new();
        for (field, url) in slots.iter_mut() {
            if let Some(blob) = blobs.key_of_url(url) {
                check_owned(tasks, &account, field, &blob).await?;
            } else if is_data_url(url) {
                let bytes = Bytes::from(decode_data_url(field, url)?);
                inline.push((field.clone(), url, bytes));
            }
        }
        let Some((first, _, _)) = inline.first() else {
            return Ok(Vec::new());
        };
        // The account's turn and day before any pixel is decoded.
        let total = inline.iter().map(|(_, _, b)| b.len() as u64).sum();
        let _turn = admit(tasks, &account, first, total).await?;
        let mut checked = Vec::with_capacity(inline.len());
        for (field, url, bytes) in inline {
            let image = check_image(tasks, &field, bytes.clone()).await?;
            checked.push((field, url, bytes, image));
        }
        let mut kept = Vec::with_capacity(checked.len());
        for (field, url, bytes, checked) in checked {
            match keep_upload(tasks, &account, &field, bytes, checked).await {
                Ok(upload) => {
                    **url = blobs.url(&upload.key);
                    kept.push(upload);
                }
                Err(e) => {
                    discard(tasks, &kept).await;
                    return Err(e);
                }
            }
        }
        Ok(kept)
    }
}
