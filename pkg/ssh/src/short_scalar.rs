//! OpenSSH ECDSA P-256 keys whose private scalar encodes in fewer than 32 bytes.
//!
//! The key decoder russh pins (ssh-key 0.7.0-rc.11) refuses a P-256 private key whose `mpint` scalar is shorter
//! than 32 bytes ("length invalid"). An `mpint` drops leading zero bytes, so `ssh-keygen` writes such a key
//! for about one P-256 key in 256: without this, one user in 256 would see a valid key refused (and a sandbox
//! test that generates a fresh ECDSA key failed at that rate). [`pad_short_p256_scalar`] rewrites such a key as
//! an unencrypted OpenSSH key whose scalar is left-padded to 32 bytes — the same number — which the decoder
//! reads. It runs only after the decoder refused a key; every buffer holding key material is zeroized.

use base64::{Engine, engine::general_purpose::STANDARD};
use russh::keys::ssh_key;
use zeroize::Zeroizing;

const BEGIN: &str = "-----BEGIN OPENSSH PRIVATE KEY-----";
const END: &str = "-----END OPENSSH PRIVATE KEY-----";
const MAGIC: &[u8] = b"openssh-key-v1\0";
const P256: &[u8] = b"ecdsa-sha2-nistp256";
const SCALAR_LEN: usize = 32;
/// Block size of the `none` cipher: the private section is padded to it.
const BLOCK: usize = 8;

/// The key rewritten with a 32-byte scalar, unencrypted; `None` when `pem` is not an OpenSSH P-256 key with a
/// short scalar, or it is encrypted and cannot be decrypted with `passphrase` (the caller keeps the decoder's
/// own error then).
pub(crate) fn pad_short_p256_scalar(pem: &str, passphrase: Option<&str>) -> Option<Zeroizing<String>> {
    let body: Zeroizing<String> = Zeroizing::new(
        pem.trim()
            .strip_prefix(BEGIN)?
            .strip_suffix(END)?
            .split_whitespace()
            .collect(),
    );
    let blob = Zeroizing::new(STANDARD.decode(body.as_bytes()).ok()?);
    let mut outer = Reader(blob.strip_prefix(MAGIC)?);
    let cipher_name = outer.string()?;
    let _kdf_name = outer.string()?;
    let _kdf_options = outer.string()?;
    if outer.u32()? != 1 {
        return None;
    }
    let public = outer.string()?;
    let private = outer.string()?;
    if Reader(public).string()? != P256 {
        return None;
    }
    let plain = if cipher_name == b"none" {
        Zeroizing::new(private.to_vec())
    } else {
        // The library parses an encrypted key (its private section stays opaque) and derives the cipher key;
        // only the decoding of the decrypted section is what it gets wrong.
        let key = ssh_key::PrivateKey::from_openssh(pem).ok()?;
        let cipher = key.cipher();
        if cipher.has_tag() {
            return None;
        }
        let (k, iv) = key.kdf().derive_key_and_iv(cipher, passphrase?).ok()?;
        let mut buf = Zeroizing::new(private.to_vec());
        cipher.decrypt(&k, &iv, &mut buf, None).ok()?;
        buf
    };

    let mut section = Reader(&plain);
    let (check1, check2) = (section.u32()?, section.u32()?);
    if check1 != check2 {
        // A wrong passphrase.
        return None;
    }
    let key_type = section.string()?;
    let curve = section.string()?;
    let point = section.string()?;
    let scalar = section.string()?;
    let comment = section.string()?;
    if key_type != P256 || scalar.is_empty() || scalar.len() >= SCALAR_LEN {
        return None;
    }
    let mut padded = Zeroizing::new([0u8; SCALAR_LEN]);
    padded[SCALAR_LEN - scalar.len()..].copy_from_slice(scalar);

    // Capacities are exact or larger, so no buffer holding key material is reallocated (and left behind).
    let mut rewritten = Zeroizing::new(Vec::with_capacity(plain.len() + SCALAR_LEN + BLOCK));
    rewritten.extend_from_slice(&check1.to_be_bytes());
    rewritten.extend_from_slice(&check2.to_be_bytes());
    for field in [key_type, curve, point, &padded[..], comment] {
        put_string(&mut rewritten, field);
    }
    let padding = (BLOCK - rewritten.len() % BLOCK) % BLOCK;
    rewritten.extend((1..=padding).map(|b| b as u8));

    let mut out = Zeroizing::new(Vec::with_capacity(blob.len() + 2 * SCALAR_LEN + 64));
    out.extend_from_slice(MAGIC);
    put_string(&mut out, b"none");
    put_string(&mut out, b"none");
    put_string(&mut out, b"");
    out.extend_from_slice(&1u32.to_be_bytes());
    put_string(&mut out, public);
    put_string(&mut out, &rewritten);

    let encoded = Zeroizing::new(STANDARD.encode(&*out));
    let mut text = Zeroizing::new(String::with_capacity(encoded.len() * 72 / 70 + 80));
    text.push_str(BEGIN);
    text.push('\n');
    for line in encoded.as_bytes().chunks(70) {
        // Base64 is ASCII.
        text.push_str(std::str::from_utf8(line).ok()?);
        text.push('\n');
    }
    text.push_str(END);
    text.push('\n');
    Some(text)
}

/// SSH wire format: big-endian u32 and length-prefixed strings.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn u32(&mut self) -> Option<u32> {
        let (head, rest) = self.0.split_first_chunk::<4>()?;
        self.0 = rest;
        Some(u32::from_be_bytes(*head))
    }

    fn string(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.u32()?).ok()?;
        if self.0.len() < len {
            return None;
        }
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(head)
    }
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    // Fields of a private key are far below 4 GiB.
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use russh::keys::{HashAlg, PublicKey, decode_secret_key};

    use super::*;

    /// Made with `ssh-keygen -t ecdsa -b 256` (retried until the scalar had 31 bytes); a test key only.
    const SHORT: &str = include_str!("../tests/fixtures/ecdsa-p256-short-scalar");
    const SHORT_PUB: &str = include_str!("../tests/fixtures/ecdsa-p256-short-scalar.pub");
    /// The same key after `ssh-keygen -p -N capkk-test-passphrase` (aes256-ctr, bcrypt KDF).
    const SHORT_ENCRYPTED: &str = include_str!("../tests/fixtures/ecdsa-p256-short-scalar-encrypted");
    const PASSPHRASE: &str = "capkk-test-passphrase";

    /// The rewritten key decodes, carries the file's public key, and signs what that public key verifies:
    /// the scalar is the same number, not just any 32 bytes.
    fn assert_same_key(rewritten: &str) {
        let key = decode_secret_key(rewritten, None).expect("the rewritten key decodes");
        let public = PublicKey::from_openssh(SHORT_PUB).unwrap();
        assert_eq!(key.public_key().key_data(), public.key_data());
        let sig = key.sign("capkk-test", HashAlg::Sha256, b"message").unwrap();
        public
            .verify("capkk-test", b"message", &sig)
            .expect("the public key verifies the rewritten key's signature");
        assert_eq!(
            key.comment(),
            PublicKey::from_openssh(SHORT_PUB).unwrap().comment()
        );
    }

    #[test]
    fn the_pinned_decoder_refuses_such_a_key_which_is_why_this_module_exists() {
        // When a russh upgrade makes this fail, the decoder reads short scalars itself: remove this module.
        assert!(decode_secret_key(SHORT, None).is_err());
        assert!(decode_secret_key(SHORT_ENCRYPTED, Some(PASSPHRASE)).is_err());
    }

    #[test]
    fn an_unencrypted_key_with_a_31_byte_scalar_is_rewritten_to_the_same_key() {
        assert_same_key(&pad_short_p256_scalar(SHORT, None).expect("rewritten"));
    }

    #[test]
    fn an_encrypted_key_with_a_31_byte_scalar_is_decrypted_and_rewritten_to_the_same_key() {
        assert_same_key(&pad_short_p256_scalar(SHORT_ENCRYPTED, Some(PASSPHRASE)).expect("rewritten"));
    }

    #[test]
    fn a_wrong_or_missing_passphrase_rewrites_nothing() {
        assert!(pad_short_p256_scalar(SHORT_ENCRYPTED, Some("wrong")).is_none());
        assert!(pad_short_p256_scalar(SHORT_ENCRYPTED, None).is_none());
    }

    #[test]
    fn keys_that_decode_already_or_are_not_openssh_p256_are_left_alone() {
        let rewritten = pad_short_p256_scalar(SHORT, None).unwrap();
        // A 32-byte scalar is not short.
        assert!(pad_short_p256_scalar(&rewritten, None).is_none());
        assert!(pad_short_p256_scalar("not a key", None).is_none());
        assert!(pad_short_p256_scalar(&format!("{BEGIN}\n!!!\n{END}\n"), None).is_none());
        let truncated: String = SHORT.lines().take(3).chain([END]).collect::<Vec<_>>().join("\n");
        assert!(pad_short_p256_scalar(&truncated, None).is_none());
    }
}
