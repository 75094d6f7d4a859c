//! Just enough DER to read a certificate's `notAfter` (the renewal decision needs it).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One DER element: (tag, contents, rest).
pub(super) fn tlv(buf: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = buf.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub(super) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// A DER UTCTime (tag 0x17) or GeneralizedTime (0x18) in UTC.
pub(super) fn der_time(tag: u8, s: &[u8]) -> Option<SystemTime> {
    let s = std::str::from_utf8(s).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 if s.len() == 12 => {
            let yy: i64 = s[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &s[2..])
        }
        0x18 if s.len() == 14 => (s[..4].parse().ok()?, &s[4..]),
        _ => return None,
    };
    let n = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let days = days_from_civil(year, n(0)?, n(2)?);
    let secs = days * 86400 + n(4)? * 3600 + n(6)? * 60 + n(8)?;
    u64::try_from(secs)
        .ok()
        .map(|s| UNIX_EPOCH + Duration::from_secs(s))
}

/// The `notAfter` of a DER certificate.
pub fn not_after(der: &[u8]) -> Option<SystemTime> {
    let (_, cert, _) = tlv(der)?;
    let (_, tbs, _) = tlv(cert)?;
    let mut rest = tbs;
    let (tag, _, r) = tlv(rest)?;
    if tag == 0xa0 {
        rest = r; // version
    }
    let (_, _, r) = tlv(rest)?; // serial
    let (_, _, r) = tlv(r)?; // signature algorithm
    let (_, _, r) = tlv(r)?; // issuer
    let (_, validity, _) = tlv(r)?;
    let (_, _, r) = tlv(validity)?; // notBefore
    let (tag, t, _) = tlv(r)?;
    der_time(tag, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Option<SystemTime> {
        Some(UNIX_EPOCH + Duration::from_secs(secs))
    }

    #[test]
    fn utc_and_generalized_time() {
        assert_eq!(der_time(0x17, b"700101000000Z"), at(0));
        // UTCTime's two-digit years: 50-99 are 19xx, 00-49 are 20xx (RFC 5280).
        assert_eq!(der_time(0x17, b"491231235959Z"), at(2_524_607_999));
        assert_eq!(
            der_time(0x17, b"500101000000Z"),
            None,
            "1950: before the epoch"
        );
        assert_eq!(der_time(0x18, b"20500101000000Z"), at(2_524_608_000));
        assert_eq!(der_time(0x18, b"20240229120000Z"), at(1_709_208_000));
        // Not UTC, the wrong length, or another tag.
        assert_eq!(der_time(0x17, b"700101000000+0100"), None);
        assert_eq!(der_time(0x18, b"700101000000Z"), None);
        assert_eq!(der_time(0x02, b"700101000000Z"), None);
    }

    #[test]
    fn lengths() {
        assert_eq!(
            tlv(&[0x04, 0x02, 1, 2, 9]),
            Some((0x04, &[1u8, 2][..], &[9u8][..]))
        );
        let mut long = vec![0x04, 0x81, 0x80];
        long.extend([7u8; 0x80]);
        assert_eq!(
            tlv(&long).map(|(_, c, r)| (c.len(), r.len())),
            Some((0x80, 0))
        );
        assert_eq!(tlv(&[0x04, 0x05, 1]), None, "shorter than its length");
        assert_eq!(tlv(&[0x04, 0x80]), None, "indefinite length is not DER");
    }
}
