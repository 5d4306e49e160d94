//! How often a client may try to sign in or sign up, counted in the store so that the limits
//! hold across nodes.
//!
//! Sign-in follows the "device cookie" design (OWASP's *Slow Down Online Guessing Attacks with
//! Device Cookies*): a browser that has signed in to an account before carries a cookie naming
//! that account, and is counted apart from everyone else. Everyone else is limited per client
//! address and per (address, email) pair, which refuse, and per email across all addresses,
//! which only slows: past a number of failures each further try waits a growing, capped delay
//! but is never refused. So a guesser spends its own address's tries, many addresses only buy
//! slower guesses, and the owner is never locked out: from a known browser the account-wide
//! count does not apply at all, and from any other browser it costs at most the delay.
//!
//! Scopes are plain strings, one namespace per kind, in the store's one table:
//! `addr NET`, `email EMAIL`, `email EMAIL addr NET`, `email EMAIL browser NONCE` and
//! `signup NET`. Emails hold no spaces, so every scope of one email starts with `email EMAIL `
//! and one prefix clears them all (`easel accounts unlock`).

use std::net::IpAddr;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use crate::store::{now_ms, Store, StoreResult};

/// The sliding window sign-in failures are counted over.
pub const SIGN_IN_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Failed sign-ins from one address (any emails) within the window before it is refused.
pub const SIGN_IN_MAX_PER_ADDRESS: i64 = 20;
/// Failed sign-ins for one email from one address within the window before that pair is
/// refused.
pub const SIGN_IN_MAX_PER_ADDRESS_AND_EMAIL: i64 = 5;
/// Failed sign-ins from one known browser for its account within the window before it is
/// refused (only its holder can spend these).
pub const SIGN_IN_MAX_PER_KNOWN_BROWSER: i64 = 5;
/// Failed sign-ins for one email from browsers it does not know, from anywhere, within the
/// window before each further try waits.
pub const SIGN_IN_FREE_PER_EMAIL: i64 = 10;
/// The longest that wait gets: long enough to make each guess cost, short enough for a person.
pub const SIGN_IN_DELAY_MAX: Duration = Duration::from_secs(10);
/// The window sign-ups are counted over (`signups_per_hour`).
pub const SIGNUP_WINDOW: Duration = Duration::from_secs(3600);
/// The cookie that makes a browser known to the account it signed in to.
pub const KNOWN_BROWSER_COOKIE: &str = "easel_browser";
/// How long a browser keeps that cookie.
pub const KNOWN_BROWSER_DAYS: i64 = 365;

/// What a sign-in (or sign-up) may do now.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    Go,
    /// Go, after waiting this long (the email has many recent failures from unknown browsers).
    Wait(Duration),
    /// Refused until the window moves on, even with the right password.
    Refused,
}

/// One try to sign in to `email` from `address`, perhaps from a browser known to the account.
pub struct Attempt {
    address: String,
    email: String,
    /// The known browser's nonce (from its cookie, checked against the account).
    browser: Option<String>,
}

impl Attempt {
    /// `browser` is the nonce [`known_browser`] returned for this request's cookie, if any.
    pub fn new(address: &str, email: &str, browser: Option<String>) -> Attempt {
        Attempt {
            address: format!("addr {}", network(address)),
            email: format!("email {}", email_key(email)),
            browser,
        }
    }

    fn pair(&self) -> String {
        format!("{} {}", self.email, self.address)
    }

    fn browser_scope(&self) -> Option<String> {
        self.browser
            .as_ref()
            .map(|nonce| format!("{} browser {nonce}", self.email))
    }

    /// Whether it may be tried now, checked before the password whether the email has an
    /// account or not (so the answer tells nothing about which do).
    pub async fn gate(&self, store: &dyn Store) -> StoreResult<Gate> {
        let since = now_ms() - ms(SIGN_IN_WINDOW);
        let count = |scope: String| async move { store.throttle_events(&scope, since).await };
        if let Some(scope) = self.browser_scope() {
            return Ok(if count(scope).await? < SIGN_IN_MAX_PER_KNOWN_BROWSER {
                Gate::Go
            } else {
                Gate::Refused
            });
        }
        if count(self.address.clone()).await? >= SIGN_IN_MAX_PER_ADDRESS
            || count(self.pair()).await? >= SIGN_IN_MAX_PER_ADDRESS_AND_EMAIL
        {
            return Ok(Gate::Refused);
        }
        Ok(match delay(count(self.email.clone()).await?) {
            Some(wait) => Gate::Wait(wait),
            None => Gate::Go,
        })
    }

    /// Count a failure: against the known browser alone, or against the address, the pair and
    /// the email.
    pub async fn failed(&self, store: &dyn Store) -> StoreResult<()> {
        let scopes = match self.browser_scope() {
            Some(scope) => vec![scope],
            None => vec![self.address.clone(), self.pair(), self.email.clone()],
        };
        record(store, &scopes).await
    }

    /// A success clears this pair's and this browser's failures. Not the address's (one
    /// account's success says nothing about the other emails tried from there), nor the
    /// email's: the owner signing in does not end someone else's guessing from elsewhere.
    pub async fn succeeded(&self, store: &dyn Store) -> StoreResult<()> {
        store.clear_throttle_events(&self.pair()).await?;
        if let Some(scope) = self.browser_scope() {
            store.clear_throttle_events(&scope).await?;
        }
        Ok(())
    }
}

/// How long a try waits with `failures` recent failures for its email from unknown browsers:
/// nothing up to [`SIGN_IN_FREE_PER_EMAIL`], then 1 s doubling with each failure, at most
/// [`SIGN_IN_DELAY_MAX`].
pub fn delay(failures: i64) -> Option<Duration> {
    let over = failures - SIGN_IN_FREE_PER_EMAIL;
    (over >= 0).then(|| {
        Duration::from_secs(1)
            .saturating_mul(1 << over.min(16))
            .min(SIGN_IN_DELAY_MAX)
    })
}

/// Forget every failed sign-in recorded for `email`: from everywhere, from each address and
/// from each known browser (`easel accounts unlock`).
pub async fn unlock(store: &dyn Store, email: &str) -> StoreResult<()> {
    store
        .clear_throttle_events(&format!("email {}", email_key(email)))
        .await
}

/// Whether `address` may make another account: fewer than `per_hour` made from its network in
/// the last hour.
pub async fn signup_allowed(store: &dyn Store, address: &str, per_hour: u32) -> StoreResult<bool> {
    let since = now_ms() - ms(SIGNUP_WINDOW);
    let made = store.throttle_events(&signup_scope(address), since).await?;
    Ok(made < i64::from(per_hour))
}

/// Count an account made from `address`.
pub async fn signed_up(store: &dyn Store, address: &str) -> StoreResult<()> {
    record(store, &[signup_scope(address)]).await
}

fn signup_scope(address: &str) -> String {
    format!("signup {}", network(address))
}

/// Record one event per scope now, forgetting those older than the longest window.
async fn record(store: &dyn Store, scopes: &[String]) -> StoreResult<()> {
    let now = now_ms();
    let keep = ms(SIGN_IN_WINDOW.max(SIGNUP_WINDOW));
    store.record_throttle_events(scopes, now, now - keep).await
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// What the limits count a client by: its IPv4 address, or the /64 network of its IPv6 address,
/// since one IPv6 host is usually given a whole /64 and could otherwise take a new address for
/// every try.
pub fn network(address: &str) -> String {
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => v4.to_string(),
        Ok(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
        // Not an address (no peer was known): all such requests share one count.
        Err(_) => "unknown".to_string(),
    }
}

/// The email as scopes hold it: trimmed and ASCII case-folded (as the store compares emails),
/// any space or control character (none in a valid email) made `_` so that it cannot reach into
/// another scope, and at most 256 characters.
fn email_key(email: &str) -> String {
    email
        .trim()
        .chars()
        .take(256)
        .map(|c| {
            if c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

/// The HMAC of a known browser's nonce for an account. Keyed by the account's password hash,
/// which only the store holds and which has a random salt: the cookie cannot be made without
/// it, needs no table of its own, and stops naming the browser when the password changes.
fn browser_mac(password_hash: &str, email: &str, nonce: &str) -> Hmac<Sha256> {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(password_hash.as_bytes()).expect("any key length");
    mac.update(b"easel known browser\0");
    mac.update(email_key(email).as_bytes());
    mac.update(b"\0");
    mac.update(nonce.as_bytes());
    mac
}

/// A new value for the known-browser cookie of the account (`email`, `password_hash`):
/// `NONCE.TAG`, a random 128-bit nonce and a 128-bit HMAC tag, both base64url.
pub fn known_browser_token(email: &str, password_hash: &str) -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let nonce = URL_SAFE_NO_PAD.encode(bytes);
    let tag = browser_mac(password_hash, email, &nonce)
        .finalize()
        .into_bytes();
    format!("{nonce}.{}", URL_SAFE_NO_PAD.encode(&tag[..16]))
}

/// The cookie's nonce if `cookie` was made by [`known_browser_token`] for this account (and
/// its current password); None otherwise. The tag is compared in constant time.
pub fn known_browser(cookie: &str, email: &str, password_hash: &str) -> Option<String> {
    let (nonce, tag) = cookie.split_once('.')?;
    let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
    if nonce.len() != 22 || tag.len() != 16 {
        return None;
    }
    browser_mac(password_hash, email, nonce)
        .verify_truncated_left(&tag)
        .ok()
        .map(|()| nonce.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        assert_eq!(network("192.0.2.7"), "192.0.2.7");
        assert_eq!(network("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(network("2001:db8:1:2:aa::1"), "2001:db8:1:2::/64");
        assert_eq!(network("2001:db8:1:2:bb::9"), network("2001:db8:1:2::1"));
        assert_ne!(network("2001:db8:1:3::1"), network("2001:db8:1:2::1"));
        assert_eq!(network(""), "unknown");
    }

    #[test]
    fn the_wait_grows_and_stops_at_the_cap() {
        assert_eq!(delay(0), None);
        assert_eq!(delay(SIGN_IN_FREE_PER_EMAIL - 1), None);
        assert_eq!(delay(SIGN_IN_FREE_PER_EMAIL), Some(Duration::from_secs(1)));
        assert_eq!(
            delay(SIGN_IN_FREE_PER_EMAIL + 2),
            Some(Duration::from_secs(4))
        );
        assert_eq!(delay(SIGN_IN_FREE_PER_EMAIL + 4), Some(SIGN_IN_DELAY_MAX));
        assert_eq!(delay(i64::MAX), Some(SIGN_IN_DELAY_MAX));
    }

    #[test]
    fn scopes_of_one_email_share_a_prefix_no_other_email_has() {
        let a = Attempt::new("192.0.2.7", " Ann@Example.com ", Some("n".repeat(22)));
        assert_eq!(a.email, "email ann@example.com");
        assert_eq!(a.pair(), "email ann@example.com addr 192.0.2.7");
        assert!(a
            .browser_scope()
            .unwrap()
            .starts_with("email ann@example.com "));
        let spaced = Attempt::new("192.0.2.7", "ann@example.com x", None);
        assert_eq!(spaced.email, "email ann@example.com_x");
    }

    #[test]
    fn a_known_browser_cookie_names_one_account_and_one_password() {
        let hash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2g";
        let token = known_browser_token("Ann@example.com", hash);
        let nonce = known_browser(&token, "ann@EXAMPLE.com", hash).expect("known");
        assert!(token.starts_with(&nonce));
        assert_ne!(token, known_browser_token("ann@example.com", hash));
        assert_eq!(known_browser(&token, "bob@example.com", hash), None);
        assert_eq!(
            known_browser(&token, "ann@example.com", "another hash"),
            None
        );
        let (nonce, tag) = token.split_once('.').unwrap();
        let forged = format!("{nonce}.{}", URL_SAFE_NO_PAD.encode([0u8; 16]));
        assert_eq!(known_browser(&forged, "ann@example.com", hash), None);
        let short = format!("{nonce}.{}", &tag[..4]);
        assert_eq!(known_browser(&short, "ann@example.com", hash), None);
        assert_eq!(known_browser("", "ann@example.com", hash), None);
    }
}
