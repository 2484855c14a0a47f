//! Which addresses the manager may connect to: the classification both of its outbound paths share, the
//! SSH pool's dials (`capkk-ssh`) and controller-side downloads (`capkk-service`'s `DownloadPolicy`).
//!
//! It lives here because this is the lowest crate both depend on (`capkk-ssh` is not below `capkk-service`,
//! nor the reverse), and the check belongs where the dial happens: the SSH pool is the one place every
//! host connection (KKCluster probes, host work, reset, remediation, in-place upgrades) goes through, so a
//! check there cannot be forgotten by a caller, and the pool dials exactly the addresses it checked. A check
//! in the controller before handing the pool a name would leave the pool to resolve the name again
//! (DNS rebinding between the check and the connect). No I/O here: resolving is the caller's.
//!
//! Refused always: unspecified, link-local (169.254.0.0/16 and fe80::/10, where cloud metadata answers), the
//! metadata addresses outside link-local, multicast and broadcast. Refused unless the policy allows it:
//! loopback. Refused as the operator says: the cluster's own ranges ([`AddressPolicy::deny`]). Ordinary
//! private ranges (10/8, 172.16/12, 192.168/16, 198.18/15, fc00::/7) are allowed: hosts and mirrors on
//! private networks are the normal case. An IPv6 address that embeds an IPv4 one (mapped, compatible,
//! NAT64, 6to4) is checked as both.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    str::FromStr,
};

/// An IP range such as `10.96.0.0/12` or `fd00::/8`; a bare address is a range of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` lies in the range (an IPv4 range never contains an IPv6 address, nor the reverse).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not an IP range like 10.96.0.0/12 or fd00::/8");
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?
            }
            Some(_) => return Err(bad()),
            None => max,
        };
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Why an address must not be reached. Its text says what the address is, never the address itself (the
/// caller names the field and the flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `0.0.0.0/8` or `::`: reaches the manager itself.
    Unspecified,
    /// 169.254.0.0/16 or fe80::/10, where cloud metadata services answer.
    LinkLocal,
    /// A cloud metadata service outside link-local.
    Metadata,
    /// Multicast or broadcast.
    Multicast,
    /// Loopback, not allowed by the policy.
    Loopback,
    /// In one of the operator's deny ranges (the cluster's own).
    Denied(Cidr),
}

impl Refusal {
    /// Whether no policy can allow it (unspecified, link-local, metadata, multicast/broadcast).
    pub fn always(&self) -> bool {
        !matches!(self, Refusal::Loopback | Refusal::Denied(_))
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Unspecified => f.write_str("an unspecified address (it reaches the manager itself)"),
            Refusal::LinkLocal => f.write_str("a link-local address (where cloud metadata services answer)"),
            Refusal::Metadata => f.write_str("a cloud metadata address"),
            Refusal::Multicast => f.write_str("a multicast or broadcast address"),
            Refusal::Loopback => f.write_str("a loopback address"),
            Refusal::Denied(c) => write!(f, "an address in {c}, one of the cluster's own ranges"),
        }
    }
}

/// The IPv4 address an IPv6 one carries and reaches through the usual translations: mapped
/// (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) and 6to4 (`2002:AABB:CCDD::/48`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        Some(v4)
    } else if (s[..6] == [0; 6] && !(ip.is_unspecified() || ip.is_loopback()))
        || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        Some(low)
    } else if s[0] == 0x2002 {
        Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ))
    } else {
        None
    }
}

/// Cloud metadata services outside link-local: Alibaba Cloud's 100.100.100.200, AWS's IPv6 endpoint.
const METADATA: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
];

/// Which addresses may be reached (see the module documentation). The default refuses the fixed classes and
/// loopback, with no deny ranges and no exceptions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    /// Ranges refused besides the fixed classes: the management cluster's Service and Pod ranges.
    pub deny: Vec<Cidr>,
    /// Ranges the operator allows although they are loopback or in [`AddressPolicy::deny`] (the more specific
    /// word wins over the general guard). Never an exception to the fixed classes.
    pub allow: Vec<Cidr>,
    /// Every loopback address may be reached (an exception to the loopback rule only, not to `deny`).
    pub allow_loopback: bool,
}

impl AddressPolicy {
    /// Why `ip` must not be reached (`None`: it may).
    pub fn refusal(&self, ip: IpAddr) -> Option<Refusal> {
        let mut forms = vec![ip];
        if let IpAddr::V6(v6) = ip
            && let Some(v4) = embedded_v4(v6)
        {
            forms.push(IpAddr::V4(v4));
        }
        forms.into_iter().find_map(|ip| self.refusal_of(ip))
    }

    fn refusal_of(&self, ip: IpAddr) -> Option<Refusal> {
        let (loopback, unspecified, link_local, multicast) = match ip {
            IpAddr::V4(a) => (
                a.is_loopback(),
                a.octets()[0] == 0,
                a.is_link_local(),
                a.is_multicast() || a.is_broadcast(),
            ),
            IpAddr::V6(a) => (
                a.is_loopback(),
                a.is_unspecified(),
                a.is_unicast_link_local(),
                a.is_multicast(),
            ),
        };
        if unspecified {
            return Some(Refusal::Unspecified);
        }
        if link_local {
            return Some(Refusal::LinkLocal);
        }
        if METADATA.contains(&ip) {
            return Some(Refusal::Metadata);
        }
        if multicast {
            return Some(Refusal::Multicast);
        }
        if self.allow.iter().any(|c| c.contains(ip)) {
            return None;
        }
        if loopback && !self.allow_loopback {
            return Some(Refusal::Loopback);
        }
        self.deny
            .iter()
            .find(|c| c.contains(ip))
            .map(|c| Refusal::Denied(*c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn loopback_link_local_metadata_unspecified_and_multicast_addresses_are_refused_by_default() {
        let p = AddressPolicy::default();
        for (addr, want) in [
            ("127.0.0.1", Refusal::Loopback),
            ("127.3.2.1", Refusal::Loopback),
            ("::1", Refusal::Loopback),
            ("::ffff:127.0.0.1", Refusal::Loopback),
            ("169.254.169.254", Refusal::LinkLocal),
            ("169.254.0.23", Refusal::LinkLocal),
            ("fe80::1", Refusal::LinkLocal),
            ("::ffff:169.254.169.254", Refusal::LinkLocal),
            ("64:ff9b::a9fe:a9fe", Refusal::LinkLocal),
            ("2002:a9fe:a9fe::1", Refusal::LinkLocal),
            ("100.100.100.200", Refusal::Metadata),
            ("fd00:ec2::254", Refusal::Metadata),
            ("0.0.0.0", Refusal::Unspecified),
            ("0.1.2.3", Refusal::Unspecified),
            ("::", Refusal::Unspecified),
            ("224.0.0.1", Refusal::Multicast),
            ("255.255.255.255", Refusal::Multicast),
            ("ff02::1", Refusal::Multicast),
        ] {
            assert_eq!(p.refusal(ip(addr)), Some(want), "{addr}");
            let why = want.to_string();
            assert!(
                !why.contains(addr),
                "the reason names the class, not the address: {why}"
            );
        }
    }

    #[test]
    fn ordinary_private_and_public_addresses_are_allowed_outside_the_deny_ranges() {
        let p = AddressPolicy {
            deny: cidrs(&["10.96.0.0/12", "10.244.0.0/16"]),
            ..Default::default()
        };
        for addr in [
            "10.0.0.5",
            "10.95.255.255",
            "10.112.0.1",
            "172.16.0.1",
            "192.168.1.10",
            "198.18.0.1",
            "198.19.255.1",
            "100.64.0.1",
            "fd12:3456::1",
            "8.8.8.8",
            "2001:db8::1",
            "::ffff:192.168.1.1",
        ] {
            assert_eq!(p.refusal(ip(addr)), None, "{addr}");
        }
        for addr in ["10.96.0.1", "10.111.255.254", "10.244.3.4", "::ffff:10.96.0.10"] {
            assert!(matches!(p.refusal(ip(addr)), Some(Refusal::Denied(_))), "{addr}");
        }
    }

    #[test]
    fn an_allowed_range_opens_loopback_and_the_deny_ranges_it_covers_and_nothing_else() {
        let p = AddressPolicy {
            deny: cidrs(&["10.96.0.0/12"]),
            allow: cidrs(&["127.0.0.0/8", "10.100.0.0/16", "169.254.0.0/16", "0.0.0.0/0"]),
            allow_loopback: false,
        };
        assert_eq!(p.refusal(ip("127.0.0.1")), None);
        assert_eq!(p.refusal(ip("10.100.2.3")), None, "hosts inside a deny range");
        assert_eq!(
            p.refusal(ip("::1")),
            Some(Refusal::Loopback),
            "an IPv4 range is no exception for IPv6 loopback"
        );
        for (addr, want) in [
            ("169.254.169.254", Refusal::LinkLocal),
            ("0.0.0.0", Refusal::Unspecified),
            ("100.100.100.200", Refusal::Metadata),
            ("255.255.255.255", Refusal::Multicast),
        ] {
            assert_eq!(
                p.refusal(ip(addr)),
                Some(want),
                "{addr} is refused whatever is allowed"
            );
            assert!(want.always());
        }
    }

    #[test]
    fn allowing_every_loopback_address_leaves_a_deny_range_over_loopback_in_force() {
        let p = AddressPolicy {
            deny: cidrs(&["127.0.0.2/32"]),
            allow: Vec::new(),
            allow_loopback: true,
        };
        assert_eq!(p.refusal(ip("127.0.0.1")), None);
        assert_eq!(p.refusal(ip("::1")), None);
        assert_eq!(
            p.refusal(ip("127.0.0.2")),
            Some(Refusal::Denied("127.0.0.2/32".parse().unwrap()))
        );
        assert_eq!(p.refusal(ip("169.254.169.254")), Some(Refusal::LinkLocal));
    }

    #[test]
    fn ranges_parse_or_say_what_they_expect() {
        assert_eq!(
            "10.96.0.0/12".parse::<Cidr>().unwrap().to_string(),
            "10.96.0.0/12"
        );
        assert_eq!("10.0.0.1".parse::<Cidr>().unwrap().to_string(), "10.0.0.1/32");
        assert_eq!("fd00::/8".parse::<Cidr>().unwrap().to_string(), "fd00::/8");
        assert!("0.0.0.0/0".parse::<Cidr>().unwrap().contains(ip("8.8.8.8")));
        for bad in [
            "10.0.0.0/33",
            "10.0.0.0/",
            "10.0.0/8",
            "::/129",
            "x",
            "10.0.0.0/+8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
