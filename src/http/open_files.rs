//! The open-files limit a node needs: every connection (an event stream is one) holds a file
//! descriptor, beside the database's, the images' and the backends'. Many systems start a
//! service with a soft limit of 1,024 while allowing far more, so the node raises its soft limit
//! to the hard one at start, as nginx's `worker_rlimit_nofile` and Go's runtime do, and says
//! when even the hard limit is short of `max_connections`.

/// Descriptors kept for what is not a client connection: the database's files or connections,
/// images being written and read, backends, the listeners.
pub const RESERVED: libc::rlim_t = 256;

/// The soft limit after raising it to the hard one (or to the kernel's most, where that is
/// lower), and the hard one; None where they cannot be read.
pub fn raise_to_hard() -> Option<(libc::rlim_t, libc::rlim_t)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: getrlimit and setrlimit read and write only the struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    // An unlimited hard limit still stops at the kernel's `nr_open` for this resource.
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|n| n.trim().parse::<libc::rlim_t>().ok());
    let target = nr_open.map_or(limit.rlim_max, |n| n.min(limit.rlim_max));
    if limit.rlim_cur < target {
        let raised = libc::rlimit {
            rlim_cur: target,
            rlim_max: limit.rlim_max,
        };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    Some((limit.rlim_cur, limit.rlim_max))
}

/// Raise the limit and warn when it leaves less than `max_connections` connections' room.
pub fn prepare(max_connections: usize) {
    let Some((soft, hard)) = raise_to_hard() else {
        return;
    };
    let needed = (max_connections as libc::rlim_t).saturating_add(RESERVED);
    if soft < needed {
        tracing::warn!(
            open_files = soft,
            hard_limit = hard,
            needed,
            "the open-files limit is below max_connections + {RESERVED}: connections past it are \
             refused by the kernel; raise the hard limit (ulimit -n, systemd's LimitNOFILE, a \
             container's nofile ulimit) or lower max_connections"
        );
    } else {
        tracing::debug!(open_files = soft, "open-files limit");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let (soft, hard) = super::raise_to_hard().expect("the limit can be read");
        let nr_open: libc::rlim_t = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .map_or(libc::rlim_t::MAX, |n| n.trim().parse().unwrap());
        assert_eq!(soft, hard.min(nr_open));
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        assert_eq!(limit.rlim_cur, soft);
    }
}
