//! A request's JSON object body, read field by field so that every error names the field it is
//! about (the HTTP layer checks its media type and size and parses it).

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::refusal::ApiError;

/// A JSON object body.
pub struct JsonObject(pub Map<String, Value>);

impl JsonObject {
    /// A string field; None when absent or null.
    pub fn opt_str(&self, field: &str) -> Result<Option<&str>, ApiError> {
        match self.0.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::field(field, "invalid_type", "must be a string")),
        }
    }

    pub fn req_str(&self, field: &str) -> Result<&str, ApiError> {
        self.opt_str(field)?
            .ok_or_else(|| ApiError::field(field, "missing_field", "is required"))
    }

    pub fn req_array(&self, field: &str) -> Result<&Vec<Value>, ApiError> {
        match self.0.get(field) {
            None | Some(Value::Null) => Err(ApiError::field(field, "missing_field", "is required")),
            Some(Value::Array(items)) => Ok(items),
            Some(_) => Err(ApiError::field(field, "invalid_type", "must be an array")),
        }
    }
}

/// Parse a task id, naming `field` in the error.
pub fn task_id(field: &str, raw: &str) -> Result<Uuid, ApiError> {
    Uuid::try_parse(raw).map_err(|_| ApiError::field(field, "invalid_value", "must be a UUID"))
}
