//! The open connections by client address, for `max_connections_per_address`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The open connections by client address. IPv6 clients are counted by /64, the block one
/// subscriber usually has, so that changing addresses inside it gains nothing.
pub(super) struct Addresses {
    max: usize,
    open: Arc<Mutex<HashMap<Client, usize>>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Client {
    V4(u32),
    /// The top 64 bits.
    V6(u64),
}

/// One connection's place in its address's count.
pub(super) struct Place {
    key: Client,
    open: Arc<Mutex<HashMap<Client, usize>>>,
}

impl Addresses {
    pub(super) fn new(max: usize) -> Addresses {
        Addresses {
            max,
            open: Arc::default(),
        }
    }

    /// A place for a connection from `ip`, or `None` when its address has all it may.
    pub(super) fn admit(&self, ip: IpAddr) -> Option<Option<Place>> {
        if self.max == 0 {
            return Some(None);
        }
        let key = match ip.to_canonical() {
            IpAddr::V4(v4) => Client::V4(v4.into()),
            IpAddr::V6(v6) => Client::V6((u128::from(v6) >> 64) as u64),
        };
        let mut open = self.open.lock().expect("not poisoned");
        let count = open.entry(key).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(Some(Place {
            key,
            open: self.open.clone(),
        }))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self.open.lock().expect("not poisoned");
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_counted_by_host_and_ipv6_by_slash_64() {
        let addresses = Addresses::new(2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let first = addresses.admit(a).unwrap();
        let _second = addresses.admit(a).unwrap();
        assert!(addresses.admit(a).is_none(), "a third from one address");
        assert!(addresses.admit("192.0.2.2".parse().unwrap()).is_some());
        drop(first);
        let _third = addresses
            .admit(a)
            .expect("a place frees as a connection ends");

        let _v6 = addresses.admit("2001:db8:0:1::1".parse().unwrap()).unwrap();
        let _v6b = addresses
            .admit("2001:db8:0:1::ffff".parse().unwrap())
            .unwrap();
        assert!(addresses
            .admit("2001:db8:0:1:abcd::2".parse().unwrap())
            .is_none());
        assert!(addresses
            .admit("2001:db8:0:2::1".parse().unwrap())
            .is_some());
        // An IPv4-mapped IPv6 address is its IPv4 address.
        assert!(addresses
            .admit("::ffff:192.0.2.1".parse().unwrap())
            .is_none());

        assert!(Addresses::new(0).admit(a).unwrap().is_none(), "no limit");
    }
}
