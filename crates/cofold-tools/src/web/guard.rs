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

/// True for the addresses web_fetch never reaches: every block of the IANA IPv4 and IPv6
/// special-purpose address registries (loopback, private, shared 100.64.0.0/10, link-local,
/// documentation, benchmarking, NAT64 64:ff9b::/96, 6to4, Teredo, unique-local, …), multicast,
/// and IPv4-mapped or IPv4-compatible forms of the refused IPv4 addresses.
///
/// The registries also list a few blocks that are reachable on the internet (AS112 name
/// servers, AMT relays); none of them serves web pages, so the whole registry is refused rather
/// than judged entry by entry.
pub fn is_internal(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4() {
            // `to_ipv4` also turns `::` and `::1` into IPv4 addresses in 0.0.0.0/8, refused too.
            Some(v4) => is_internal_v4(v4),
            None => is_internal_v6(v6),
        },
    }
}

/// IPv4 blocks as (network, prefix length).
const SPECIAL_V4: [([u8; 4], u8); 19] = [
    ([0, 0, 0, 0], 8),          // "this network"
    ([10, 0, 0, 0], 8),         // private
    ([100, 64, 0, 0], 10),      // shared address space (carrier-grade NAT)
    ([127, 0, 0, 0], 8),        // loopback
    ([169, 254, 0, 0], 16),     // link-local
    ([172, 16, 0, 0], 12),      // private
    ([192, 0, 0, 0], 24),       // IETF protocol assignments
    ([192, 0, 2, 0], 24),       // documentation (TEST-NET-1)
    ([192, 31, 196, 0], 24),    // AS112-v4
    ([192, 52, 193, 0], 24),    // AMT
    ([192, 88, 99, 0], 24),     // deprecated 6to4 relay anycast
    ([192, 168, 0, 0], 16),     // private
    ([192, 175, 48, 0], 24),    // direct delegation AS112
    ([198, 18, 0, 0], 15),      // benchmarking
    ([198, 51, 100, 0], 24),    // documentation (TEST-NET-2)
    ([203, 0, 113, 0], 24),     // documentation (TEST-NET-3)
    ([224, 0, 0, 0], 4),        // multicast
    ([240, 0, 0, 0], 4),        // reserved
    ([255, 255, 255, 255], 32), // limited broadcast
];

/// IPv6 blocks as (network, prefix length). `::/128`, `::1/128`, the IPv4-mapped `::ffff:0:0/96`
/// and the deprecated IPv4-compatible `::/96` never get here: [`is_internal`] judges them as the
/// IPv4 address they carry.
const SPECIAL_V6: [([u16; 8], u8); 13] = [
    ([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96), // NAT64 well-known prefix
    ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), // NAT64 local-use prefix
    ([0x100, 0, 0, 0, 0, 0, 0, 0], 64),     // discard-only
    ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23),    // IETF protocol assignments (Teredo, ORCHID, …)
    ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), // documentation
    ([0x2002, 0, 0, 0, 0, 0, 0, 0], 16),    // 6to4
    ([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48), // direct delegation AS112
    ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),    // documentation
    ([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16),    // segment routing SIDs
    ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),     // unique-local
    ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),    // link-local
    ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),    // deprecated site-local
    ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),     // multicast
];

fn in_block(address: u128, network: u128, prefix: u8, bits: u32) -> bool {
    let shift = bits.saturating_sub(u32::from(prefix));
    // A shift by the whole width would overflow; a zero-length prefix covers everything.
    shift >= 128 || address >> shift == network >> shift
}

fn is_internal_v4(address: Ipv4Addr) -> bool {
    let value = u128::from(u32::from(address));
    SPECIAL_V4.iter().any(|(network, prefix)| {
        let network = u128::from(u32::from(Ipv4Addr::from(*network)));
        in_block(value, network, *prefix, 32)
    })
}

fn is_internal_v6(address: Ipv6Addr) -> bool {
    let value = u128::from(address);
    SPECIAL_V6.iter().any(|(network, prefix)| {
        let network = u128::from(Ipv6Addr::from(*network));
        in_block(value, network, *prefix, 128)
    })
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
            "100.64.0.1",
            "100.127.255.255",
            "127.0.0.1",
            "127.255.255.254",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.9",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::127.0.0.1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:100.64.0.1",
            "64:ff9b::1",
            "64:ff9b::a00:1",
            "64:ff9b:1::1",
            "100::1",
            "2001::1",
            "2001:db8::1",
            "2002:7f00:1::1",
            "3fff::1",
            "fc00::1",
            "fdff::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
        ] {
            assert!(internal(refused), "{refused} should be refused");
        }
    }

    #[test]
    fn allowed_ranges() {
        for allowed in [
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "223.255.255.255",
            "198.20.0.1",
            "93.184.215.14",
            "8.8.8.8",
            "64:ff9b:2::1",
            "2001:200::1",
            "2606:4700::1111",
            "fe7f::1",
        ] {
            assert!(!internal(allowed), "{allowed} should be allowed");
        }
    }
}
