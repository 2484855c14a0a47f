//! `write_files[].encoding`: every spelling cloud-init accepts, decoded to exact bytes.

use std::io::Read;

use base64::Engine as _;

/// The decoded content of all `write_files` of one payload together may not exceed this (a plan-wide
/// budget: many gzip bombs, each under a per-file cap, must not exhaust the controller either). CABPK payloads
/// decode to well under 1 MiB.
pub const MAX_DECODED_BYTES: u64 = 64 * 1024 * 1024;

/// How a `write_files` entry's `content` is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// Plain text (no `encoding`, or `text/plain`).
    Text,
    /// `base64`, `b64`.
    Base64,
    /// `gzip`, `gz` (content given as `!!binary`).
    Gzip,
    /// `gzip+base64`, `gz+base64`, `gzip+b64`, `gz+b64`.
    GzipBase64,
}

impl Encoding {
    /// Parse an `encoding` value as cloud-init does (case-insensitive, surrounding blanks ignored).
    /// Unlike cloud-init, which writes unknown encodings as plain text with a warning, an unknown
    /// spelling is `None` (the caller reports it).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "text/plain" => Some(Encoding::Text),
            "b64" | "base64" => Some(Encoding::Base64),
            "gz" | "gzip" => Some(Encoding::Gzip),
            "gz+base64" | "gzip+base64" | "gz+b64" | "gzip+b64" => Some(Encoding::GzipBase64),
            _ => None,
        }
    }

    /// Decode `content` to the bytes to write (at most [`MAX_DECODED_BYTES`]).
    pub fn decode(self, content: &[u8]) -> Result<Vec<u8>, String> {
        self.decode_limited(content, MAX_DECODED_BYTES)
    }

    /// Decode `content`, failing as soon as the result would exceed `limit` bytes (a decompressor stops
    /// reading there).
    pub fn decode_limited(self, content: &[u8], limit: u64) -> Result<Vec<u8>, String> {
        let out = match self {
            Encoding::Text => content.to_vec(),
            Encoding::Base64 => decode_base64(content)?,
            Encoding::Gzip => gunzip(content, limit)?,
            Encoding::GzipBase64 => gunzip(&decode_base64(content)?, limit)?,
        };
        if out.len() as u64 > limit {
            return Err(too_big(limit));
        }
        Ok(out)
    }

    /// Encode `data` so that [`decode`](Self::decode) returns it (fixtures, tests).
    pub fn encode(self, data: &[u8]) -> Vec<u8> {
        match self {
            Encoding::Text => data.to_vec(),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .encode(data)
                .into_bytes(),
            Encoding::Gzip => gzip(data),
            Encoding::GzipBase64 => base64::engine::general_purpose::STANDARD
                .encode(gzip(data))
                .into_bytes(),
        }
    }
}

/// Python's non-validating `b64decode`: characters outside the alphabet (line breaks, blanks) are dropped.
fn decode_base64(content: &[u8]) -> Result<Vec<u8>, String> {
    let filtered: Vec<u8> = content
        .iter()
        .copied()
        .filter(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
        .collect();
    // Padding is only meaningful at the end; stop at the first '=' like binascii does.
    let end = filtered.iter().position(|&b| b == b'=').unwrap_or(filtered.len());
    let data = &filtered[..end];
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    );
    engine.decode(data).map_err(|e| format!("invalid base64: {e}"))
}

fn too_big(limit: u64) -> String {
    format!(
        "the decoded content exceeds the {limit} bytes left of the bootstrap data's budget of \
         {MAX_DECODED_BYTES} bytes"
    )
}

fn gunzip(data: &[u8], limit: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(data)
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("invalid gzip data: {e}"))?;
    if out.len() as u64 > limit {
        return Err(too_big(limit));
    }
    Ok(out)
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cloud_init_spelling_is_recognised() {
        for (s, e) in [
            ("base64", Encoding::Base64),
            ("B64", Encoding::Base64),
            (" gzip ", Encoding::Gzip),
            ("gz", Encoding::Gzip),
            ("gzip+base64", Encoding::GzipBase64),
            ("gz+base64", Encoding::GzipBase64),
            ("gzip+b64", Encoding::GzipBase64),
            ("GZ+B64", Encoding::GzipBase64),
            ("text/plain", Encoding::Text),
        ] {
            assert_eq!(Encoding::parse(s), Some(e), "{s}");
        }
        assert_eq!(Encoding::parse("base32"), None);
    }

    #[test]
    fn base64_ignores_line_breaks_and_missing_padding() {
        assert_eq!(Encoding::Base64.decode(b"aGVs\nbG8=\n").unwrap(), b"hello");
        assert_eq!(Encoding::Base64.decode(b"aGVsbG8").unwrap(), b"hello");
        assert!(Encoding::Base64.decode(b"a").is_err());
    }

    #[test]
    fn garbage_gzip_is_an_error() {
        assert!(Encoding::Gzip.decode(b"not gzip").is_err());
        assert!(Encoding::GzipBase64.decode(b"bm90IGd6aXA=").is_err());
    }
}
