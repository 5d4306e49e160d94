//! The errors of the contract: every way a request can be refused, with its stable code. The
//! use cases return them; the HTTP layer (`http::error`) alone turns them into responses, and
//! logs and counts the faults among them. A foundation: it knows no HTTP, store or metric (each
//! store's errors become these in `store::error`).

pub mod query;

/// Every way a request can fail, as the contract names it.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("unauthorized")]
    Unauthorized,
    /// 400. `code` is stable; `msg` names the field first (`prompt: must not be empty`).
    #[error("{msg}")]
    BadRequest { code: &'static str, msg: String },
    #[error("task not found")]
    TaskNotFound,
    /// 404 `account_not_found`: an operator named an account that does not exist.
    #[error("account not found")]
    AccountNotFound,
    #[error("no such route")]
    RouteNotFound,
    #[error("file not found")]
    FileNotFound,
    /// 404 `not_found`: something an operator named (a moderation list) is not there.
    #[error("{0}")]
    NotFound(String),
    /// 404 `upload_not_found`: an upload that is not the caller's, or no longer kept (never
    /// revealing which). `msg` names the field.
    #[error("{msg}")]
    UploadNotFound { msg: String },
    /// 415 for an upload that is neither `multipart/form-data` nor an image type.
    #[error(
        "Content-Type must be multipart/form-data, or image/png, image/jpeg, image/webp or          image/gif with the image as the body"
    )]
    UnsupportedUploadType,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("{msg}")]
    Conflict { code: &'static str, msg: String },
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("the request body did not arrive in time")]
    RequestTimeout,
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    /// 402: the account's credits do not cover the task.
    #[error("{msg}")]
    InsufficientCredits { msg: String },
    /// 402 `account_expired`: the account's `expires_at` has passed.
    #[error("the account has expired; its operator can extend it")]
    AccountExpired,
    /// 429 `quota_exceeded`: a quota of the account's (tasks pending, upload bytes a day,
    /// event streams open) is spent.
    #[error("{msg}")]
    QuotaExceeded { msg: String, retry_after_secs: u64 },
    #[error("{msg}")]
    Unavailable { msg: String, retry_after_secs: u64 },
    /// 429 `rate_limited`: the key's or the account's request rate limit is spent.
    #[error("too many requests for this {}; try again in {} s", .0.scope.as_str(), .0.retry_after_secs)]
    RateLimited(RateRefusal),
    #[error("internal error: {0}")]
    Internal(anyhow::Error),
    /// The task store failed: 503 `unavailable` when it could not be reached (try again
    /// shortly), 500 for anything else.
    #[error("{cause}")]
    Store {
        unavailable: bool,
        cause: anyhow::Error,
    },
    /// 422 `idempotency_key_reused`: the key's first answer was to another request.
    #[error(
        "Idempotency-Key: this key was used for a different request (another operation or \
         body) within its time to live; send this request with a new key"
    )]
    IdempotencyKeyReused,
    /// 409 `idempotency_key_in_use`, with `Retry-After: 1`: a request with the same account and
    /// key is being handled.
    #[error("Idempotency-Key: a request with this key is in progress; retry it shortly")]
    IdempotencyKeyInUse,
}

impl ApiError {
    pub fn field(field: &str, code: &'static str, problem: impl std::fmt::Display) -> ApiError {
        ApiError::BadRequest {
            code,
            msg: format!("{field}: {problem}"),
        }
    }
}

/// Which rate limit refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateScope {
    Key,
    Account,
}

impl RateScope {
    pub fn as_str(self) -> &'static str {
        match self {
            RateScope::Key => "key",
            RateScope::Account => "account",
        }
    }
}

/// A request refused by a rate limit: what the 429 answer says.
#[derive(Clone, Debug)]
pub struct RateRefusal {
    pub scope: RateScope,
    pub burst: u32,
    pub window_secs: u64,
    /// Whole seconds until one more request is allowed (at least 1).
    pub retry_after_secs: u64,
}

impl RateRefusal {
    /// The 429 answer's headers: `Retry-After`, and the `RateLimit-Policy` and `RateLimit`
    /// fields of draft-ietf-httpapi-ratelimit-headers-10 (structured-field lists of named
    /// policies: `q` the quota of requests per `w` seconds; `r` remaining, `t` seconds to reset).
    pub fn headers(&self) -> [(&'static str, String); 3] {
        let name = self.scope.as_str();
        [
            ("retry-after", self.retry_after_secs.to_string()),
            (
                "ratelimit-policy",
                format!("\"{name}\";q={};w={}", self.burst, self.window_secs),
            ),
            (
                "ratelimit",
                format!("\"{name}\";r=0;t={}", self.retry_after_secs),
            ),
        ]
    }
}
