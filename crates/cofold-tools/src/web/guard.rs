//! The internal-address guard (S13): which addresses web_fetch refuses, and the resolver seam.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures::future::BoxFuture;

/// Resolves a host name to every address it answers with. Injected in tests; the default is
/// the system resolver.
pub trait Lookup: Send + Sync {
    /// All addresses for `host` (no port). An empty list counts as a failed lookup.
    fn lookup(&self, host: &str) -> BoxFuture<'_, std::io::Result<Vec<IpAddr>>>;
}

/// The operating system's resolver, every address it returns.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: &str) -> BoxFuture<'_, std::io::Result<Vec<IpAddr>>> {
        let host = host.to_owned();
        Box::pin(async move {
            let mut addresses: Vec<IpAddr> = Vec::new();
            for socket in tokio::net::lookup_host((host.as_str(), 0)).await? {
                if !addresses.contains(&socket.ip()) {
                    addresses.push(socket.ip());
                }
            }
            Ok(addresses)
        })
    }
}

/// True for the addresses web_fetch never reaches: loopback, private, link-local, "this
/// network", the IPv6 unspecified address, unique-local, and IPv4-mapped forms of the IPv4 ones.
pub fn is_internal(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_internal_v4(v4),
            None => is_internal_v6(v6),
        },
    }
}

fn is_internal_v4(address: Ipv4Addr) -> bool {
    let [a, b, ..] = address.octets();
    a == 0 // 0.0.0.0/8
        || a == 10 // 10.0.0.0/8
        || a == 127 // 127.0.0.0/8
        || (a == 169 && b == 254) // 169.254.0.0/16
        || (a == 172 && (16..=31).contains(&b)) // 172.16.0.0/12
        || (a == 192 && b == 168) // 192.168.0.0/16
}

fn is_internal_v6(address: Ipv6Addr) -> bool {
    let first = address.segments()[0];
    address.is_unspecified()
        || address.is_loopback()
        || (first & 0xfe00) == 0xfc00 // fc00::/7
        || (first & 0xffc0) == 0xfe80 // fe80::/10
}

#[cfg(test)]
mod tests {
    use super::*;

    fn internal(text: &str) -> bool {
        is_internal(text.parse().expect("an address"))
    }

    #[test]
    fn refused_ranges() {
        for refused in [
            "0.0.0.0",
            "0.255.1.1",
            "10.1.2.3",
            "127.0.0.1",
            "127.255.255.254",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "::",
            "::1",
            "fc00::1",
            "fdff::1",
            "fe80::1",
            "febf::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(internal(refused), "{refused} should be refused");
        }
    }

    #[test]
    fn allowed_ranges() {
        for allowed in [
            "172.15.255.255",
            "172.32.0.1",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "192.0.2.1",
            "198.18.0.1",
            "93.184.215.14",
            "::127.0.0.1",
            "64:ff9b::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "fe7f::1",
        ] {
            assert!(!internal(allowed), "{allowed} should be allowed");
        }
    }
}
